// Sharded HDF5 files: named global float32 tensors of which each rank holds one contiguous slice
// of the row-major flattened tensor, written and read collectively with parallel HDF5 (MPI-IO),
// plus small values (strings, int64s, doubles) that are the same on every rank. The checkpoint
// format is built on this; io/ knows nothing about what the tensors are.
//
// Every member function of both classes is collective over the communicator given at
// construction: every rank calls the same functions in the same order with the same names
// (DESIGN.md invariant 6; the file is opened with collective metadata operations). Errors about
// the file (missing, not HDF5, truncated, a missing tensor, a wrong shape, a bad checksum, a
// failed write) are InputErrors that every rank throws alike: ranks agree with a collective
// before throwing, so none is left waiting in a collective. Misuse by the caller (ranges that
// are not disjoint or do not cover a tensor, ranks passing different shapes) is a fatal error.
//
// Tensors are stored as contiguous IEEE F32LE datasets of their real global shape, each with a
// "crc32" attribute (uint32): zlib's crc32 of the whole tensor's bytes in row-major order,
// combined from the ranks' slices (so it does not depend on the world size). Names use '/' for
// groups ("/model/model.layers.0.mlp.up_proj.weight"); intermediate groups are created.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/hdf5_handle.hpp"

namespace shardrl {

class ShardedFileWriter {
 public:
  // Creates (truncates) `path`. A file that cannot be created -> InputError naming it.
  ShardedFileWriter(const std::filesystem::path& path, MPI_Comm comm);
  // Closes the file if close() was not called (without the durability step); never throws.
  // Collective like everything else: a writer abandoned after an InputError is destroyed on
  // every rank.
  ~ShardedFileWriter();
  ShardedFileWriter(const ShardedFileWriter&) = delete;
  ShardedFileWriter& operator=(const ShardedFileWriter&) = delete;

  // Every rank passes the same name and shape (any rank, {} for a 0-d tensor). This rank holds
  // elements [begin, begin + count) of the flattened tensor (count may be 0); the ranks' ranges
  // are disjoint and cover the tensor. Writes the slices with collective transfers and stores
  // the "crc32" attribute. After an InputError the file is incomplete: destroy the writer. A
  // transfer that fails on a rank (a full disk) stops the job at once (a fatal error): the other
  // ranks may be inside HDF5's collective write, where no agreement reaches them.
  void write(const std::string& name, const std::vector<std::uint64_t>& shape, std::uint64_t begin,
             std::uint64_t count, const float* data);

  // Small values, the same on every rank (rank 0's are written). Scalars are scalar datasets
  // (int64: STD_I64LE, double: IEEE_F64LE); a string is a scalar fixed-length, null-terminated
  // UTF-8 string dataset (h5dump and h5py show it as text; a string holding a null character
  // reads back up to it); int64s a 1-d STD_I64LE dataset.
  void write_string(const std::string& name, const std::string& value);
  void write_int64(const std::string& name, std::int64_t value);
  void write_int64s(const std::string& name, const std::vector<std::int64_t>& values);
  void write_double(const std::string& name, double value);

  // Closes every handle and the file, then makes the bytes durable: MPI_File_sync on every rank
  // (through H5Fflush, so that on a parallel file system every client's bytes reach the servers)
  // and an fsync of the closed file by rank 0. A failed flush or close stops the job at once (a
  // fatal error, as a failed tensor write); a failed fsync -> InputError on every rank. Idempotent.
  void close();

  // Fault injection (debug.fail_io = "write"): the next tensor transfer on this rank fails as a
  // full disk would, without entering HDF5, while the other ranks enter the collective write.
  void fail_next_transfer_for_test() { fail_next_transfer_ = true; }

 private:
  void create_dataset(const std::string& name, hid_t file_type, hid_t space, H5Handle& dset,
                      std::string& error);

  std::filesystem::path path_;
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  H5Handle file_;
  H5Handle dxpl_;     // collective transfers
  H5Handle lcpl_;     // creates intermediate groups
  H5Handle dcpl_;     // contiguous, never filled
  bool fail_next_transfer_ = false;
};

class ShardedFileReader {
 public:
  // A file that is missing, truncated or not HDF5 -> InputError
  // "<path>: cannot open as a shardrl checkpoint (<why>)".
  ShardedFileReader(const std::filesystem::path& path, MPI_Comm comm);
  ~ShardedFileReader() = default;
  ShardedFileReader(const ShardedFileReader&) = delete;
  ShardedFileReader& operator=(const ShardedFileReader&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Whether a dataset of that name exists.
  bool has(const std::string& name) const;
  // A missing dataset -> InputError "<path>: no tensor <name>".
  std::vector<std::uint64_t> shape(const std::string& name) const;

  // Reads elements [begin, begin + count) of the flattened tensor into `data` (count may be 0).
  // The ranks' ranges need not match those at write (a file written by N ranks is read by M);
  // they may overlap. A missing tensor -> InputError "<path>: no tensor <name>"; a tensor that
  // is not float32 -> "<path>: tensor <name>: stored as <type>, expected float32"; another
  // shape -> "<path>: tensor <name>: shape (a, b) in the file, expected (c, d)". With `verify`
  // the ranges must be disjoint and cover the tensor; its crc32 is recomputed from every rank's
  // slice and compared with the stored one: "<path>: tensor <name>: checksum mismatch (stored
  // 0x%08x, computed 0x%08x)" ("stored none" when the attribute is missing).
  void read(const std::string& name, const std::vector<std::uint64_t>& expected_shape, std::uint64_t begin,
            std::uint64_t count, float* data, bool verify);

  // Small values. A missing dataset -> InputError "<path>: no dataset <name>"; one of another
  // kind -> "<path>: <name>: expected an int64, found string of shape ()". Strings may be
  // fixed-length or variable-length (read up to the first null character).
  std::string read_string(const std::string& name) const;
  std::int64_t read_int64(const std::string& name) const;
  std::vector<std::int64_t> read_int64s(const std::string& name) const;
  double read_double(const std::string& name) const;

  // Every dataset path in the file ("/model/x"), sorted, for `shardrl inspect`.
  std::vector<std::string> datasets() const;
  // Reads every float32 tensor that has a crc32 attribute, split across the ranks in pieces of
  // bounded size, and returns the names (sorted) whose checksum does not match or that cannot
  // be read; the same list on every rank. Datasets for which `required` is true must be float32
  // with a checksum, as a verified read requires: otherwise they are listed too, with the reason
  // ("NAME (no checksum)", "NAME (not float32)"), so that "all verified" means what a resume
  // would accept.
  std::vector<std::string> verify_all(const std::function<bool(const std::string&)>& required = {});

 private:
  std::filesystem::path path_;
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  H5Handle file_;
  H5Handle dxpl_;     // collective transfers
};

}  // namespace shardrl
