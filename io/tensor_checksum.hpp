// The checksum of a tensor that ranks hold in slices: zlib's CRC-32 of the whole tensor's bytes in
// row-major order (IEEE F32LE), combined from the slices' CRCs in the order of their ranges with
// crc32_combine, so it does not depend on how many ranks wrote or read it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardrl {

// zlib's crc32(crc, bytes), computed with PCLMULQDQ folding where the CPU has it (x86-64 host
// code), else by zlib.
std::uint32_t crc32_bytes(std::uint32_t crc, const unsigned char* buf, std::size_t len);
inline std::uint32_t crc_of(const float* data, std::uint64_t count, std::uint32_t crc = 0) {
  return crc32_bytes(crc, reinterpret_cast<const unsigned char*>(data), count * sizeof(float));
}

// One rank's slice of a tensor, as every rank learns it.
struct Slice {
  std::uint64_t key = 0;     // hash of the tensor's name and shape (all ranks must agree)
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  std::uint64_t crc = 0;     // crc32 of the slice's bytes
};
static_assert(sizeof(Slice) == 4 * sizeof(std::uint64_t), "Slice travels as 4 uint64");

// Every rank's slice, on every rank (one all-gather).
std::vector<Slice> gather_slices(MPI_Comm comm, int size, const Slice& mine);
// Every rank's slices, any number per rank (of many tensors), on every rank, in rank order.
std::vector<Slice> gather_all_slices(MPI_Comm comm, const std::vector<Slice>& mine);
// The whole tensor's CRC from its slices. The slices must be disjoint and cover [0, total)
// (a fatal error naming `tensor` otherwise).
std::uint32_t combine_slices(std::vector<Slice> slices, std::uint64_t total, const std::string& tensor);
// A hash of a tensor's name and shape: ranks check that they describe the same tensor.
std::uint64_t tensor_key(const std::string& name, const std::vector<std::uint64_t>& shape);

}  // namespace shardrl
