#include "io/sharded_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/sharded_file_detail.hpp"
#include "io/tensor_checksum.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

using namespace sharded_file_detail;

ShardedFileWriter::ShardedFileWriter(const std::filesystem::path& path, MPI_Comm comm) : path_(path), comm_(comm) {
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  QuietHdf5 quiet;
  // Every rank must see the file's directory: a rank that does not (a relative or node-local
  // path) would leave the others waiting in the collective create for ever.
  {
    const std::filesystem::path dir = path_.has_parent_path() ? path_.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    agree_on_error(comm_, std::filesystem::is_directory(dir, ec)
                              ? std::string()
                              : fmt::format("{}: cannot create: rank {} of {} sees no directory {}: every rank must "
                                            "see it at this path",
                                            path_.string(), rank_, size_, dir.string()));
  }
  H5Handle fapl = make_fapl(comm_, true);
  std::string error;
  const hid_t file = H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (file < 0)
    error = fmt::format("{}: cannot create ({})", path_.string(), hdf5_error_text());
  else
    file_ = H5Handle(file);
  agree_on_error(comm_, error);

  dxpl_ = make_collective_dxpl();
  lcpl_ = H5Handle(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_LINK_CREATE)));
  SHARDRL_H5_REQUIRE(H5Pset_create_intermediate_group(lcpl_.get(), 1));
  dcpl_ = H5Handle(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_DATASET_CREATE)));
  SHARDRL_H5_REQUIRE(H5Pset_layout(dcpl_.get(), H5D_CONTIGUOUS));
  SHARDRL_H5_REQUIRE(H5Pset_alloc_time(dcpl_.get(), H5D_ALLOC_TIME_EARLY));   // parallel HDF5 requires it
  SHARDRL_H5_REQUIRE(H5Pset_fill_time(dcpl_.get(), H5D_FILL_TIME_NEVER));     // every element is written
}

ShardedFileWriter::~ShardedFileWriter() {
  QuietHdf5 quiet;
  file_.reset();
}

void ShardedFileWriter::create_dataset(const std::string& name, hid_t file_type, hid_t space, H5Handle& dset,
                                       std::string& error) {
  const hid_t id = H5Dcreate2(file_.get(), name.c_str(), file_type, space, lcpl_.get(), dcpl_.get(), H5P_DEFAULT);
  if (id < 0)
    error = fmt::format("{}: cannot create dataset {} ({})", path_.string(), name, hdf5_error_text());
  else
    dset = H5Handle(id);
}

void ShardedFileWriter::write(const std::string& name, const std::vector<std::uint64_t>& shape, std::uint64_t begin,
                              std::uint64_t count, const float* data) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write after close() of " + path_.string());
  const std::string dname = absolute_name(name);
  const std::uint64_t total = numel(shape);
  SHARDRL_CHECK(begin <= total && count <= total - begin,
                fmt::format("range [{}, {}) inside tensor {} of {} elements", begin, begin + count, dname, total));
  SHARDRL_CHECK(count == 0 || data != nullptr, "data for tensor " + dname);
  QuietHdf5 quiet;

  // This slice's crc32 is computed on a helper thread while the slice is written rather than
  // before it (bench_checkpoint_io, llama-1b at np 2: save / plain write() went from ~0.7 to ~1.0).
  // The joiner waits for it on every way out, exceptions included.
  std::uint32_t my_crc = 0;
  std::thread crc_thread;
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{crc_thread};
  if (count >= kThreadedCrcElements)
    crc_thread = std::thread([&my_crc, data, count] { my_crc = crc_of(data, count); });
  else
    my_crc = crc_of(data, count);

  // Every rank learns every slice before any HDF5 call, so that misuse (different tensors, ranges
  // that overlap or leave holes) stops every rank alike.
  const Slice mine{tensor_key(dname, shape), begin, count, 0};
  std::vector<Slice> slices = gather_slices(comm_, size_, mine);
  std::uint64_t rounds = 0;
  for (const Slice& s : slices) {
    SHARDRL_CHECK(s.key == mine.key, "every rank writes the same tensor (name and shape) at the same time: " +
                                         dname + " " + shape_string(shape) + " on rank " + std::to_string(rank_));
    rounds = std::max(rounds, rounds_for(s.count));
  }
  combine_slices(slices, total, dname);   // checks the ranges

  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Handle space = make_space(dims);
  H5Handle dset;
  std::string error;
  create_dataset(dname, H5T_IEEE_F32LE, space.get(), dset, error);
  agree_on_error(comm_, error);

  for (std::uint64_t r = 0; r < rounds; ++r) {
    const std::uint64_t off = std::min(count, r * kMaxTransferElements);
    const std::uint64_t n = std::min(count - off, kMaxTransferElements);
    std::string why;
    if (fail_next_transfer_) {
      fail_next_transfer_ = false;
      why = "No space left on device (injected: debug.fail_io = \"write\")";
    } else {
      why = transfer(true, dset.get(), dxpl_.get(), dims, begin + off, n, const_cast<float*>(data) + (n ? off : 0));
    }
    // A failed collective write is not symmetric: HDF5 can return on this rank before a
    // collective that the other ranks wait in (a full disk under ROMIO hung every rank until the
    // watchdog), or on every rank with the file left half closed (under OMPIO, HDF5 crashed at
    // MPI_Finalize). Neither an agreement nor a clean close can be trusted: stop the job here,
    // naming the file and the tensor. The file stays uncommitted (.partial).
    if (!why.empty())
      SHARDRL_FATAL(fmt::format("{}: cannot write tensor {} ({}); the checkpoint is not committed, the ones before "
                                "it are intact",
                                path_.string(), dname, why));
  }

  // The whole tensor's crc32 from every rank's slice crc, combined in the order of the ranges.
  if (crc_thread.joinable()) crc_thread.join();
  std::vector<std::uint64_t> crcs(static_cast<std::size_t>(size_));
  const std::uint64_t my_crc64 = my_crc;
  SHARDRL_CHECK_MPI(MPI_Allgather(&my_crc64, 1, MPI_UINT64_T, crcs.data(), 1, MPI_UINT64_T, comm_));
  for (std::size_t i = 0; i < slices.size(); ++i) slices[i].crc = crcs[i];
  const std::uint32_t crc = combine_slices(slices, total, dname);

  H5Handle attr_space(SHARDRL_H5_REQUIRE(H5Screate(H5S_SCALAR)));
  const hid_t attr = H5Acreate2(dset.get(), kCrcAttribute, H5T_STD_U32LE, attr_space.get(), H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0) {
    error = hdf5_error_text();
  } else {
    H5Handle attr_handle(attr);
    if (H5Awrite(attr, H5T_NATIVE_UINT32, &crc) < 0) error = hdf5_error_text();
  }
  agree_on_error(comm_,
        error.empty() ? error
                      : fmt::format("{}: cannot write the checksum of tensor {} ({})", path_.string(), dname, error));
}

namespace {
// Creates a small dataset and writes rank 0's `data` with a collective transfer (the other ranks
// select nothing).
void write_small(const std::filesystem::path& path, MPI_Comm comm, int rank, hid_t file, hid_t lcpl, hid_t dxpl,
                 const std::string& name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
                 const void* data) {
  QuietHdf5 quiet;
  const std::string dname = absolute_name(name);
  H5Handle space = make_space(dims);
  H5Handle dcpl(SHARDRL_H5_REQUIRE(H5Pcreate(H5P_DATASET_CREATE)));
  SHARDRL_H5_REQUIRE(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  SHARDRL_H5_REQUIRE(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  std::string error;
  const hid_t id = H5Dcreate2(file, dname.c_str(), file_type, space.get(), lcpl, dcpl.get(), H5P_DEFAULT);
  if (id < 0) error = fmt::format("{}: cannot create dataset {} ({})", path.string(), dname, hdf5_error_text());
  H5Handle dset(id < 0 ? H5I_INVALID_HID : id);
  agree_on_error(comm, error);

  std::uint64_t elements = 1;
  for (auto d : dims) elements *= d;
  if (elements == 0) return;   // nothing to write (a dataset without elements has no storage)
  H5Handle file_space(SHARDRL_H5_REQUIRE(H5Scopy(space.get())));
  H5Handle mem_space(SHARDRL_H5_REQUIRE(H5Scopy(space.get())));
  if (rank != 0) {
    SHARDRL_H5_REQUIRE(H5Sselect_none(file_space.get()));
    SHARDRL_H5_REQUIRE(H5Sselect_none(mem_space.get()));
  }
  // A failed collective write, as a tensor's (ShardedFileWriter::write): stop the job here. These
  // small values are a checkpoint's first data, so a disk already full when a save starts fails
  // on them, not on a tensor.
  if (H5Dwrite(dset.get(), mem_type, mem_space.get(), file_space.get(), dxpl, data) < 0)
    SHARDRL_FATAL(fmt::format("{}: cannot write {} ({}); the checkpoint is not committed, the ones before it are "
                              "intact",
                              path.string(), dname, hdf5_error_text()));
}
}  // namespace

void ShardedFileWriter::write_string(const std::string& name, const std::string& value) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_string after close() of " + path_.string());
  H5Handle type(SHARDRL_H5_REQUIRE(H5Tcopy(H5T_C_S1)));
  SHARDRL_H5_REQUIRE(H5Tset_size(type.get(), value.size() + 1));   // with its terminating null
  SHARDRL_H5_REQUIRE(H5Tset_strpad(type.get(), H5T_STR_NULLTERM));
  SHARDRL_H5_REQUIRE(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, type.get(), type.get(), {},
              value.c_str());
}

void ShardedFileWriter::write_int64(const std::string& name, std::int64_t value) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_int64 after close() of " + path_.string());
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, {},
              &value);
}

void ShardedFileWriter::write_int64s(const std::string& name, const std::vector<std::int64_t>& values) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_int64s after close() of " + path_.string());
  const std::int64_t none = 0;
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64,
              {values.size()}, values.empty() ? &none : values.data());
}

void ShardedFileWriter::write_double(const std::string& name, double value) {
  SHARDRL_CHECK(file_.get() >= 0, "ShardedFileWriter::write_double after close() of " + path_.string());
  write_small(path_, comm_, rank_, file_.get(), lcpl_.get(), dxpl_.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
              {}, &value);
}

void ShardedFileWriter::close() {
  if (file_.get() < 0) return;
  QuietHdf5 quiet;
  // With the MPI-IO driver a global flush ends in MPI_File_sync on every rank. The flush and the
  // close are collective: a failure of either (the last metadata writes on a full disk) stops the
  // job at once, as a failed tensor write does (see write()).
  auto stop = [&](const char* step) {
    SHARDRL_FATAL(fmt::format("{}: cannot write the file to disk ({}: {}); the checkpoint is not committed, the "
                              "ones before it are intact",
                              path_.string(), step, hdf5_error_text()));
  };
  if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) stop("flush");
  if (file_.close() < 0) stop("close");
  // After the collectives: rank 0's fsync can fail alone, and every rank learns it.
  const std::string error = rank_ == 0 ? fsync_file(path_) : std::string();
  agree_on_error(comm_,
        error.empty() ? error : fmt::format("{}: cannot write the file to disk ({})", path_.string(), error));
}

}  // namespace shardrl
