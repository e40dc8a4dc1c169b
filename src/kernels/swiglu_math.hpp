// The SwiGLU activation of one element in fp32, silu(g) * u = g * sigmoid(g) * u: the Kokkos
// kernels (kernels/swiglu.hpp) and the decode step's CUDA kernel (decode_gemv.cu) both form it
// here, so that their results agree bit for bit. Plain C++.
#pragma once

#include <cmath>

#include "kernels/host_device.hpp"

namespace shardrl::kernels::swiglu_math {

SHARDRL_HOST_DEVICE float sigmoid(float g) {
  // expf(-g) overflows to inf for very negative g, which gives sigmoid 0: the right limit.
  return 1.0f / (1.0f + expf(-g));
}

SHARDRL_HOST_DEVICE float activation(float g, float u) { return g * sigmoid(g) * u; }

}  // namespace shardrl::kernels::swiglu_math
