#include "io/sharded_file_detail.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/flat_range.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl::sharded_file_detail {
namespace {
float g_empty_buffer[1];   // a valid pointer for transfers of no elements
}  // namespace


// ---------------------------------------------------------------------------------------------
// Names, shapes, ranges

// "/a/b" for "a/b" or "/a/b". Components are non-empty (no "//", no trailing '/').
std::string absolute_name(const std::string& name) {
  std::string abs = !name.empty() && name[0] == '/' ? name : "/" + name;
  SHARDRL_CHECK(abs.size() > 1 && abs.back() != '/' && abs.find("//") == std::string::npos,
                "an HDF5 dataset name has non-empty '/'-separated parts: '" + name + "'");
  return abs;
}

std::uint64_t numel(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::uint64_t rounds_for(std::uint64_t count) {
  return (count + kMaxTransferElements - 1) / kMaxTransferElements;
}

// Rank r's share of n elements split evenly over `parts` ranks.
std::uint64_t share_begin(std::uint64_t n, int parts, int r) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(n) * static_cast<unsigned>(r)) /
                                    static_cast<unsigned>(parts));
}

// Selects elements [begin, end) of the row-major flattening of `space`'s extent `dims`.
void select_flat_range(hid_t space, const std::vector<hsize_t>& dims, std::uint64_t begin, std::uint64_t end) {
  if (begin == end) {
    SHARDRL_H5_REQUIRE(H5Sselect_none(space));
    return;
  }
  if (dims.empty()) {   // 0-d: the one element
    SHARDRL_H5_REQUIRE(H5Sselect_all(space));
    return;
  }
  const std::vector<HyperslabBlock> blocks = flat_range_blocks(dims, begin, end);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    SHARDRL_H5_REQUIRE(H5Sselect_hyperslab(space, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, blocks[i].start.data(),
                                           nullptr, blocks[i].count.data(), nullptr));
}

H5Handle make_space(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return H5Handle(SHARDRL_H5_REQUIRE(H5Screate(H5S_SCALAR)));
  return H5Handle(SHARDRL_H5_REQUIRE(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

std::vector<hsize_t> space_dims(hid_t space) {
  const int ndims = SHARDRL_H5_REQUIRE(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(ndims));
  if (ndims > 0) SHARDRL_H5_REQUIRE(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}

// One collective transfer of elements [begin, begin + count) (count may be 0) of the flattened
// dataset between `data` and the file. Returns HDF5's reason on failure, "" on success.
std::string transfer(bool write, hid_t dset, hid_t dxpl, const std::vector<hsize_t>& dims, std::uint64_t begin,
                     std::uint64_t count, float* data) {
  H5Handle file_space(SHARDRL_H5_REQUIRE(H5Dget_space(dset)));
  select_flat_range(file_space.get(), dims, begin, begin + count);
  // A wrong selection would make HDF5 fail on this rank alone, before the collective transfer
  // that the other ranks wait in: stop the job instead.
  SHARDRL_CHECK(H5Sget_select_npoints(file_space.get()) == static_cast<hssize_t>(count),
                fmt::format("the selection of elements [{}, {}) holds {} elements", begin, begin + count,
                            H5Sget_select_npoints(file_space.get())));
  const hsize_t mem_count = std::max<hsize_t>(count, 1);
  H5Handle mem_space(SHARDRL_H5_REQUIRE(H5Screate_simple(1, &mem_count, nullptr)));
  if (count == 0) SHARDRL_H5_REQUIRE(H5Sselect_none(mem_space.get()));
  float* buf = count == 0 ? g_empty_buffer : data;
  const herr_t rc = write ? H5Dwrite(dset, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), dxpl, buf)
                          : H5Dread(dset, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), dxpl, buf);
  return rc < 0 ? hdf5_error_text() : std::string();
}

// ---------------------------------------------------------------------------------------------
// Files

H5Handle make_fapl(MPI_Comm comm, bool writing) {
  H5Handle fapl(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_FILE_ACCESS)));
  SHARDRL_H5_REQUIRE(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  SHARDRL_H5_REQUIRE(H5Pset_all_coll_metadata_ops(fapl.get(), true));
  SHARDRL_H5_REQUIRE(H5Pset_coll_metadata_write(fapl.get(), true));
  if (writing) SHARDRL_H5_REQUIRE(H5Pset_alignment(fapl.get(), kAlignThreshold, kAlignment));
  return fapl;
}

H5Handle make_collective_dxpl() {
  H5Handle dxpl(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_DATASET_XFER)));
  SHARDRL_H5_REQUIRE(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

// fsync of a closed file. Returns the reason on failure, "" on success.
std::string fsync_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  std::string error;
  if (::fsync(fd) != 0) error = std::strerror(errno);
  ::close(fd);
  return error;
}

// Why `path` cannot be a checkpoint before HDF5 looks at it ("" when it may be one). Rank 0 only.
std::string precheck(const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return "no such file";
  if (std::filesystem::is_directory(st)) return "a directory";
  if (!std::filesystem::is_regular_file(st)) return "not a regular file";
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return "an empty file";
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_hdf5 < 0) return "cannot read it: " + hdf5_error_text();
  if (is_hdf5 == 0) return "not an HDF5 file";
  return {};
}

// The dataset `abs_name`, or an invalid handle when there is none (no such link, or not a
// dataset). Returns HDF5's reason in `error` if the file cannot be read.
H5Handle open_dataset_if_any(hid_t file, const std::string& abs_name, std::string& error) {
  // H5Lexists fails (rather than saying no) when an intermediate group is missing: walk the path.
  for (std::size_t slash = abs_name.find('/', 1);; slash = abs_name.find('/', slash + 1)) {
    const std::string prefix = abs_name.substr(0, slash);
    const htri_t exists = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (exists < 0) {
      error = hdf5_error_text();
      return {};
    }
    if (exists == 0) return {};
    if (slash == std::string::npos) break;
  }
  const hid_t obj = H5Oopen(file, abs_name.c_str(), H5P_DEFAULT);
  if (obj < 0) {
    error = hdf5_error_text();
    return {};
  }
  H5Handle handle(obj);
  if (H5Iget_type(obj) != H5I_DATASET) return {};
  return handle;
}

std::string describe_type(hid_t type) {
  const std::size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: return fmt::format("{}{}", H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits);
    case H5T_FLOAT: return fmt::format("float{}", bits);
    case H5T_STRING: return "string";
    default: return "another HDF5 type";
  }
}

bool is_float32(hid_t dset) {
  H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset)));
  return H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 4;
}

// 1 with the value, 0 when the attribute is absent, -1 with the reason in `error`.
int read_crc_attribute(hid_t dset, std::uint32_t& value, std::string& error) {
  const htri_t exists = H5Aexists(dset, kCrcAttribute);
  if (exists < 0) {
    error = hdf5_error_text();
    return -1;
  }
  if (exists == 0) return 0;
  const hid_t attr = H5Aopen(dset, kCrcAttribute, H5P_DEFAULT);
  if (attr < 0) {
    error = hdf5_error_text();
    return -1;
  }
  H5Handle handle(attr);
  if (H5Aread(attr, H5T_NATIVE_UINT32, &value) < 0) {
    error = hdf5_error_text();
    return -1;
  }
  return 1;
}


}  // namespace shardrl::sharded_file_detail
