// Internal to io/sharded_file*.cpp: what the writer and the reader share (constants, agreeing on
// errors, names and shapes, hyperslab transfers, property lists, dataset look-ups).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/hdf5_error.hpp"
#include "io/hdf5_handle.hpp"

namespace shardrl::sharded_file_detail {


inline constexpr const char* kCrcAttribute = "crc32";

// One collective transfer moves at most this many elements per rank (MPI counts are ints, and
// it bounds what MPI-IO stages at once); every rank makes the same number of transfers.
inline constexpr std::uint64_t kMaxTransferElements = std::uint64_t(1) << 28;   // 1 GiB of float32

// Slices of at least this many elements get their crc32 computed on a helper thread, overlapping
// the write.
inline constexpr std::uint64_t kThreadedCrcElements = std::uint64_t(1) << 18;   // 1 MiB

// verify_all reads each rank's share of a tensor in pieces of at most this many elements.
inline constexpr std::uint64_t kVerifyChunkElements = std::uint64_t(1) << 24;   // 64 MiB of float32

// Datasets of at least kAlignThreshold bytes start at a multiple of kAlignment in the file (as
// parallel file systems' stripes do); small ones (norms, scalars) are packed. Costs 0.55% of a
// llama-1b checkpoint's size.
inline constexpr hsize_t kAlignThreshold = hsize_t(1) << 20;
inline constexpr hsize_t kAlignment = hsize_t(1) << 20;

// "/a/b" for "a/b" or "/a/b". Components are non-empty (no "//", no trailing '/').
std::string absolute_name(const std::string& name);
std::uint64_t numel(const std::vector<std::uint64_t>& shape);
std::string shape_string(const std::vector<std::uint64_t>& shape);
std::uint64_t rounds_for(std::uint64_t count);
// Rank r's share of n elements split evenly over `parts` ranks.
std::uint64_t share_begin(std::uint64_t n, int parts, int r);

// Selects elements [begin, end) of the row-major flattening of `space`'s extent `dims`.
void select_flat_range(hid_t space, const std::vector<hsize_t>& dims, std::uint64_t begin, std::uint64_t end);
H5Handle make_space(const std::vector<hsize_t>& dims);
std::vector<hsize_t> space_dims(hid_t space);
// One collective transfer of elements [begin, begin + count) (count may be 0) of the flattened
// dataset between `data` and the file. Returns HDF5's reason on failure, "" on success.
std::string transfer(bool write, hid_t dset, hid_t dxpl, const std::vector<hsize_t>& dims, std::uint64_t begin,
                     std::uint64_t count, float* data);

H5Handle make_fapl(MPI_Comm comm, bool writing);
H5Handle make_collective_dxpl();
// fsync of a closed file. Returns the reason on failure, "" on success.
std::string fsync_file(const std::filesystem::path& path);
// Why `path` cannot be a checkpoint before HDF5 looks at it ("" when it may be one). Rank 0 only.
std::string precheck(const std::filesystem::path& path);
// The dataset `abs_name`, or an invalid handle when there is none (no such link, or not a
// dataset). Returns HDF5's reason in `error` if the file cannot be read.
H5Handle open_dataset_if_any(hid_t file, const std::string& abs_name, std::string& error);
std::string describe_type(hid_t type);
bool is_float32(hid_t dset);
// 1 with the value, 0 when the attribute is absent, -1 with the reason in `error`.
int read_crc_attribute(hid_t dset, std::uint32_t& value, std::string& error);

}  // namespace shardrl::sharded_file_detail
