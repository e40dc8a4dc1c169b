// Token embedding: forward is a row gather, backward a scatter-add into the fp32 gradient.
// T is the activation/weight type (float or bf16); gradients are always fp32.
#pragma once

#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

// out(n, :) = W(tokens(n), :)
template <class T>
void embedding_forward(const ExecSpace& space,
                       const std::int32_t* tokens,   // (N)
                       const T* W,                   // (V, D)
                       T* out,                       // (N, D)
                       int N, int D) {
  const long count = static_cast<long>(N) * D;
  Kokkos::parallel_for(
      "embedding_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const long n = i / D;
        const long d = i - n * D;
        out[i] = W[static_cast<long>(tokens[n]) * D + d];
      });
}

// dW(tokens(n), :) += dout(n, :)   (accumulates: dW is the persistent fp32 gradient)
template <class T>
void embedding_backward(const ExecSpace& space,
                        const std::int32_t* tokens,   // (N)
                        const T* dout,                // (N, D)
                        float* dW,                    // (V, D)
                        int N, int D) {
  // Atomics because a token may repeat within the batch; the summation order of repeats is
  // therefore not fixed on GPU (rows of distinct tokens are exact).
  const long count = static_cast<long>(N) * D;
  Kokkos::parallel_for(
      "embedding_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const long n = i / D;
        const long d = i - n * D;
        Kokkos::atomic_add(&dW[static_cast<long>(tokens[n]) * D + d], static_cast<float>(dout[i]));
      });
}

}  // namespace shardrl::kernels
