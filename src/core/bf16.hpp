// bfloat16 storage type usable in Kokkos kernels on CPU and GPU. Conversions round to nearest
// even, as cuBLAS and NCCL do, so host references and device results agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include <Kokkos_Core.hpp>

namespace shardrl {

struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits(round_from_float(f)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return to_float(bits); }

  KOKKOS_INLINE_FUNCTION static std::uint32_t float_bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
  }
  KOKKOS_INLINE_FUNCTION static std::uint16_t round_from_float(float f) {
    std::uint32_t u = float_bits(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<std::uint16_t>(u >> 16);
  }
  KOKKOS_INLINE_FUNCTION static float to_float(std::uint16_t b) {
    std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
};
static_assert(sizeof(bf16) == 2, "bf16 must be two bytes");

KOKKOS_INLINE_FUNCTION bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
KOKKOS_INLINE_FUNCTION bool operator!=(bf16 a, bf16 b) { return a.bits != b.bits; }

}  // namespace shardrl
