#include "io/tensor_checksum.hpp"

#include <zlib.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "mpi/mpi_check.hpp"

// x86-64 host code gets a PCLMULQDQ crc32 (chosen at run time); other hosts and nvcc use zlib's.
#if defined(__x86_64__) && !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define SHARDRL_CRC32_PCLMUL 1
#include <immintrin.h>
#else
#define SHARDRL_CRC32_PCLMUL 0
#endif

// The crc32 is of the tensor's bytes as stored (IEEE F32LE): the host's floats, on the
// little-endian hosts shardrl runs on.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32 of float slices assumes a little-endian host");
static_assert(sizeof(z_off_t) >= 8, "crc32_combine needs 64-bit lengths");

namespace shardrl {
namespace {

#if SHARDRL_CRC32_PCLMUL
// zlib's crc32 (CRC-32, reflected polynomial 0xEDB88320) by carry-less multiplication folding,
// after Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" as in Chromium's
// zlib (crc32_simd.c): 15 GB/s where zlib 1.2.13 computes 6.7 GB/s on one core. `crc` is the
// pre-inverted running value; len >= 64 and a multiple of 16.
#define SHARDRL_PCLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

SHARDRL_PCLMUL_TARGET inline __m128i load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// x.lo * k.lo ^ x.hi * k.hi (carry-less products)
SHARDRL_PCLMUL_TARGET inline __m128i fold(__m128i x, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

SHARDRL_PCLMUL_TARGET std::uint32_t crc32_fold_pclmul(const unsigned char* buf, std::size_t len, std::uint32_t crc) {
  alignas(16) static const std::uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const std::uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const std::uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const std::uint64_t poly[] = {0x01db710641, 0x01f7011641};
  __m128i x1 = _mm_xor_si128(load(buf), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = load(buf + 16), x3 = load(buf + 32), x4 = load(buf + 48);
  __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  len -= 64;
  for (; len >= 64; buf += 64, len -= 64) {   // four lanes of 16 bytes
    x1 = _mm_xor_si128(fold(x1, k), load(buf));
    x2 = _mm_xor_si128(fold(x2, k), load(buf + 16));
    x3 = _mm_xor_si128(fold(x3, k), load(buf + 32));
    x4 = _mm_xor_si128(fold(x4, k), load(buf + 48));
  }
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));   // the four lanes into one
  x1 = _mm_xor_si128(fold(x1, k), x2);
  x1 = _mm_xor_si128(fold(x1, k), x3);
  x1 = _mm_xor_si128(fold(x1, k), x4);
  for (; len >= 16; buf += 16, len -= 16) x1 = _mm_xor_si128(fold(x1, k), load(buf));
  // 128 -> 64 bits
  const __m128i mask = _mm_setr_epi32(~0, 0, ~0, 0);
  x2 = _mm_clmulepi64_si128(x1, k, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  k = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask), k, 0x00), x2);
  // Barrett reduction to 32 bits
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask), k, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, mask), k, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
}

bool cpu_has_pclmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

}  // namespace

std::uint32_t crc32_bytes(std::uint32_t crc, const unsigned char* buf, std::size_t len) {
#if SHARDRL_CRC32_PCLMUL
  if (len >= 64 && cpu_has_pclmul()) {
    const std::size_t folded = len & ~std::size_t(15);
    crc = ~crc32_fold_pclmul(buf, folded, ~crc);
    buf += folded;
    len -= folded;
  }
#endif
  return static_cast<std::uint32_t>(crc32_z(crc, buf, static_cast<z_size_t>(len)));
}

std::vector<Slice> gather_slices(MPI_Comm comm, int size, const Slice& mine) {
  std::vector<Slice> all(static_cast<std::size_t>(size));
  SHARDRL_CHECK_MPI(MPI_Allgather(&mine, 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, comm));
  return all;
}

std::vector<Slice> gather_all_slices(MPI_Comm comm, const std::vector<Slice>& mine) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int count = static_cast<int>(mine.size()) * 4;
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size), 0);
  SHARDRL_CHECK_MPI(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<Slice> all(static_cast<std::size_t>((displs.back() + counts.back()) / 4));
  SHARDRL_CHECK_MPI(MPI_Allgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), displs.data(),
                                   MPI_UINT64_T, comm));
  return all;
}

// crc32 of the whole tensor from its slices, combined in the order of their ranges (rank order
// when the ranks hold consecutive ranges). The slices must be disjoint and cover [0, total).
std::uint32_t combine_slices(std::vector<Slice> slices, std::uint64_t total, const std::string& tensor) {
  std::sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.count < b.count;
  });
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t covered = 0;
  for (const Slice& s : slices) {
    if (s.count == 0) continue;
    SHARDRL_CHECK(s.begin == covered,
                  fmt::format("the ranks' ranges of tensor {} are disjoint and cover it: a range starts at {}, "
                              "expected {}", tensor, s.begin, covered));
    crc = crc32_combine(crc, static_cast<uLong>(s.crc), static_cast<z_off_t>(s.count * sizeof(float)));
    covered += s.count;
  }
  SHARDRL_CHECK(covered == total, fmt::format("the ranks' ranges of tensor {} cover {} of its {} elements", tensor,
                                              covered, total));
  return static_cast<std::uint32_t>(crc);
}

std::uint64_t tensor_key(const std::string& name, const std::vector<std::uint64_t>& shape) {
  std::uint64_t h = 1469598103934665603ull;   // FNV-1a
  auto mix = [&h](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(name.data(), name.size());
  const std::uint64_t rank = shape.size();
  mix(&rank, sizeof rank);
  for (auto d : shape) mix(&d, sizeof d);
  return h;
}

}  // namespace shardrl
