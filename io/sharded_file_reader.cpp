#include "io/sharded_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/sharded_file_detail.hpp"
#include "io/tensor_checksum.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

using namespace sharded_file_detail;

ShardedFileReader::ShardedFileReader(const std::filesystem::path& path, MPI_Comm comm) : path_(path), comm_(comm) {
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  QuietHdf5 quiet;
  const std::string prefix = path_.string() + ": cannot open as a shardrl checkpoint (";
  // Rank 0 looks at the file; the others only that they see one there too (a node-local or
  // relative path that one rank cannot resolve would hang every rank in the collective open).
  std::string why;
  if (rank_ == 0) {
    why = precheck(path_);
  } else {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path_, ec))
      why = fmt::format("no such file on rank {} of {}: every rank must see the checkpoint at this path", rank_, size_);
  }
  agree_on_error(comm_, why.empty() ? why : prefix + why + ")");

  H5Handle fapl = make_fapl(comm_, false);
  const hid_t file = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (file < 0) {
    const Hdf5Error e = hdf5_error();
    if (e.truncated) {
      std::error_code ec;
      why = fmt::format("truncated: {} bytes, fewer than its HDF5 superblock records",
                        std::filesystem::file_size(path_, ec));
    } else {
      why = e.innermost;
    }
  } else {
    file_ = H5Handle(file);
  }
  agree_on_error(comm_, why.empty() ? why : prefix + why + ")");
  dxpl_ = make_collective_dxpl();
}

bool ShardedFileReader::has(const std::string& name) const {
  QuietHdf5 quiet;
  std::string error;
  H5Handle dset = open_dataset_if_any(file_.get(), absolute_name(name), error);
  agree_on_error(comm_, error.empty() ? error : fmt::format("{}: cannot read ({})", path_.string(), error));
  return dset.get() >= 0;
}

std::vector<std::uint64_t> ShardedFileReader::shape(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  H5Handle dset = open_dataset_if_any(file_.get(), dname, error);
  if (!error.empty())
    error = fmt::format("{}: cannot read ({})", path_.string(), error);
  else if (dset.get() < 0)
    error = fmt::format("{}: no tensor {}", path_.string(), dname);
  agree_on_error(comm_, error);
  H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
  const std::vector<hsize_t> dims = space_dims(space.get());
  return {dims.begin(), dims.end()};
}

void ShardedFileReader::read(const std::string& name, const std::vector<std::uint64_t>& expected_shape,
                             std::uint64_t begin, std::uint64_t count, float* data, bool verify) {
  const std::string dname = absolute_name(name);
  const std::uint64_t total = numel(expected_shape);
  SHARDRL_CHECK(begin <= total && count <= total - begin,
                fmt::format("range [{}, {}) inside tensor {} of {} elements", begin, begin + count, dname, total));
  SHARDRL_CHECK(count == 0 || data != nullptr, "a buffer for tensor " + dname);
  QuietHdf5 quiet;

  std::string error;
  H5Handle dset = open_dataset_if_any(file_.get(), dname, error);
  if (!error.empty()) {
    error = fmt::format("{}: cannot read ({})", path_.string(), error);
  } else if (dset.get() < 0) {
    error = fmt::format("{}: no tensor {}", path_.string(), dname);
  } else {
    H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset.get())));
    H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
    const std::vector<hsize_t> dims = space_dims(space.get());
    const std::vector<std::uint64_t> stored(dims.begin(), dims.end());
    if (!is_float32(dset.get()))
      error = fmt::format("{}: tensor {}: stored as {}, expected float32", path_.string(), dname,
                          describe_type(type.get()));
    else if (stored != expected_shape)
      error = fmt::format("{}: tensor {}: shape {} in the file, expected {}", path_.string(), dname,
                          shape_string(stored), shape_string(expected_shape));
  }
  agree_on_error(comm_, error);

  std::uint64_t my_rounds = rounds_for(count), rounds = 0;
  SHARDRL_CHECK_MPI(MPI_Allreduce(&my_rounds, &rounds, 1, MPI_UINT64_T, MPI_MAX, comm_));
  const std::vector<hsize_t> dims(expected_shape.begin(), expected_shape.end());
  for (std::uint64_t r = 0; r < rounds; ++r) {
    const std::uint64_t off = std::min(count, r * kMaxTransferElements);
    const std::uint64_t n = std::min(count - off, kMaxTransferElements);
    const std::string why = transfer(false, dset.get(), dxpl_.get(), dims, begin + off, n, data + (n ? off : 0));
    agree_on_error(comm_,
          why.empty() ? why : fmt::format("{}: tensor {}: cannot read ({})", path_.string(), dname, why));
  }
  if (!verify) return;

  const std::vector<Slice> slices = gather_slices(comm_, size_, Slice{0, begin, count, crc_of(data, count)});
  const std::uint32_t computed = combine_slices(slices, total, dname);
  std::uint32_t stored = 0;
  const int found = read_crc_attribute(dset.get(), stored, error);
  if (found < 0)
    error = fmt::format("{}: tensor {}: cannot read its checksum ({})", path_.string(), dname, error);
  else if (found == 0 || stored != computed)
    error = fmt::format("{}: tensor {}: checksum mismatch (stored {}, computed 0x{:08x})", path_.string(), dname,
                        found == 0 ? std::string("none") : fmt::format("0x{:08x}", stored), computed);
  agree_on_error(comm_, error);
}

namespace {
// A small dataset of `klass` with `elements` elements (-1: any number, 1-d or scalar), or an
// error naming the file and the dataset.
H5Handle open_small(hid_t file, const std::filesystem::path& path, const std::string& dname, H5T_class_t klass,
                    const char* kind, long elements, std::string& error, std::uint64_t& n) {
  H5Handle dset = open_dataset_if_any(file, dname, error);
  if (!error.empty()) {
    error = fmt::format("{}: cannot read ({})", path.string(), error);
    return {};
  }
  if (dset.get() < 0) {
    error = fmt::format("{}: no dataset {}", path.string(), dname);
    return {};
  }
  H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset.get())));
  H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
  const std::vector<hsize_t> dims = space_dims(space.get());
  n = 1;
  for (auto d : dims) n *= d;
  const bool shape_ok = elements < 0 ? dims.size() <= 1 : n == static_cast<std::uint64_t>(elements);
  if (H5Tget_class(type.get()) != klass || !shape_ok) {
    std::vector<std::uint64_t> shape(dims.begin(), dims.end());
    error = fmt::format("{}: {}: expected {}, found {} of shape {}", path.string(), dname, kind,
                        describe_type(type.get()), shape_string(shape));
    return {};
  }
  return dset;
}
}  // namespace

std::string ShardedFileReader::read_string(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_STRING, "a string", 1, error, n);
  agree_on_error(comm_, error);
  H5Handle type(SHARDRL_H5_REQUIRE(H5Dget_type(dset.get())));
  std::string value;
  const int is_variable = SHARDRL_H5_REQUIRE(H5Tis_variable_str(type.get()));
  if (is_variable > 0) {
    H5Handle mem_type(SHARDRL_H5_REQUIRE(H5Tcopy(H5T_C_S1)));
    SHARDRL_H5_REQUIRE(H5Tset_size(mem_type.get(), H5T_VARIABLE));
    char* text = nullptr;
    if (H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) < 0) {
      error = hdf5_error_text();
    } else if (text != nullptr) {
      value = text;
      H5free_memory(text);
    }
  } else {
    H5Handle mem_type(SHARDRL_H5_REQUIRE(H5Tcopy(type.get())));
    std::string buf(H5Tget_size(type.get()), '\0');
    if (H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
      error = hdf5_error_text();
    else
      value = buf.substr(0, buf.find('\0'));
  }
  agree_on_error(comm_, error.empty() ? error : fmt::format("{}: cannot read {} ({})", path_.string(), dname, error));
  return value;
}

std::int64_t ShardedFileReader::read_int64(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_INTEGER, "an int64", 1, error, n);
  agree_on_error(comm_, error);
  std::int64_t value = 0;
  if (H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0)
    error = fmt::format("{}: cannot read {} ({})", path_.string(), dname, hdf5_error_text());
  agree_on_error(comm_, error);
  return value;
}

std::vector<std::int64_t> ShardedFileReader::read_int64s(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_INTEGER, "int64s", -1, error, n);
  agree_on_error(comm_, error);
  std::vector<std::int64_t> values(n);
  if (n > 0 && H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    error = fmt::format("{}: cannot read {} ({})", path_.string(), dname, hdf5_error_text());
  agree_on_error(comm_, error);
  return values;
}

double ShardedFileReader::read_double(const std::string& name) const {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  std::string error;
  std::uint64_t n = 0;
  H5Handle dset = open_small(file_.get(), path_, dname, H5T_FLOAT, "a double", 1, error, n);
  agree_on_error(comm_, error);
  double value = 0;
  if (H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0)
    error = fmt::format("{}: cannot read {} ({})", path_.string(), dname, hdf5_error_text());
  agree_on_error(comm_, error);
  return value;
}

namespace {
// Appends the datasets under `group` (named `prefix`) to `out`. Returns HDF5's reason on failure.
std::string list_datasets(hid_t group, const std::string& prefix, std::vector<std::string>& out) {
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0) return hdf5_error_text();
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) return hdf5_error_text();
    std::string link(static_cast<std::size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, link.data(), link.size(), H5P_DEFAULT) < 0)
      return hdf5_error_text();
    link.resize(static_cast<std::size_t>(len));
    H5L_info_t link_info;
    if (H5Lget_info(group, link.c_str(), &link_info, H5P_DEFAULT) < 0) return hdf5_error_text();
    if (link_info.type != H5L_TYPE_HARD) continue;
    const hid_t obj = H5Oopen(group, link.c_str(), H5P_DEFAULT);
    if (obj < 0) return hdf5_error_text();
    H5Handle handle(obj);
    const std::string path = prefix + "/" + link;
    const H5I_type_t type = H5Iget_type(obj);
    if (type == H5I_DATASET) {
      out.push_back(path);
    } else if (type == H5I_GROUP) {
      std::string error = list_datasets(obj, path, out);
      if (!error.empty()) return error;
    }
  }
  return {};
}
}  // namespace

std::vector<std::string> ShardedFileReader::datasets() const {
  QuietHdf5 quiet;
  std::vector<std::string> names;
  std::string error;
  const hid_t root = H5Gopen2(file_.get(), "/", H5P_DEFAULT);
  if (root < 0) {
    error = hdf5_error_text();
  } else {
    H5Handle handle(root);
    error = list_datasets(root, "", names);
  }
  agree_on_error(comm_,
        error.empty() ? error : fmt::format("{}: cannot list its datasets ({})", path_.string(), error));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> ShardedFileReader::verify_all(const std::function<bool(const std::string&)>& required) {
  const std::vector<std::string> names = datasets();
  QuietHdf5 quiet;
  std::vector<std::string> failing;
  std::vector<float> buf;
  for (const std::string& name : names) {
    std::string error;
    H5Handle dset = open_dataset_if_any(file_.get(), name, error);
    agree_on_error(comm_, error.empty() ? error : fmt::format("{}: cannot read ({})", path_.string(), error));
    const bool must = required && required(name);
    if (!is_float32(dset.get())) {
      if (must) failing.push_back(name + " (not float32)");
      continue;
    }
    std::uint32_t stored = 0;
    const int found = read_crc_attribute(dset.get(), stored, error);
    agree_on_error(comm_,
          error.empty() ? error : fmt::format("{}: tensor {}: cannot read its checksum ({})", path_.string(), name, error));
    if (found == 0) {
      if (must) failing.push_back(name + " (no checksum)");
      continue;
    }

    H5Handle space(SHARDRL_H5_REQUIRE(H5Dget_space(dset.get())));
    const std::vector<hsize_t> dims = space_dims(space.get());
    std::uint64_t total = 1;
    for (auto d : dims) total *= d;
    const std::uint64_t begin = share_begin(total, size_, rank_);
    const std::uint64_t count = share_begin(total, size_, rank_ + 1) - begin;
    const std::uint64_t largest = (total + static_cast<std::uint64_t>(size_) - 1) / static_cast<std::uint64_t>(size_);
    const std::uint64_t chunk = std::min(largest, kVerifyChunkElements);
    const std::uint64_t rounds = chunk == 0 ? 0 : (largest + chunk - 1) / chunk;
    buf.resize(std::max<std::uint64_t>(chunk, 1));
    std::uint32_t crc = 0;
    bool read_failed = false;
    for (std::uint64_t r = 0; r < rounds && !read_failed; ++r) {
      const std::uint64_t off = std::min(count, r * chunk);
      const std::uint64_t n = std::min(count - off, chunk);
      const bool failed = !transfer(false, dset.get(), dxpl_.get(), dims, begin + off, n, buf.data()).empty();
      int any = failed ? 1 : 0, any_failed = 0;
      SHARDRL_CHECK_MPI(MPI_Allreduce(&any, &any_failed, 1, MPI_INT, MPI_MAX, comm_));
      read_failed = any_failed != 0;
      crc = crc_of(buf.data(), n, crc);
    }
    if (read_failed) {
      failing.push_back(name);
      continue;
    }
    const std::vector<Slice> slices = gather_slices(comm_, size_, Slice{0, begin, count, crc});
    if (combine_slices(slices, total, name) != stored) failing.push_back(name);
  }
  return failing;
}

}  // namespace shardrl
