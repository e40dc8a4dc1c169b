// bf16 data read in 16-byte loads by the memory-bound decode kernels (attention_decode.cu,
// decode_gemv.cu), widened to float in registers: a bf16 is the upper half of its float.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace shardrl::kernels {

// The 8 bf16 of one 16-byte load, to float, in memory order.
__device__ inline void unpack8(const uint4& raw, float (&x)[8]) {
  const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

}  // namespace shardrl::kernels
