// The linear layers of a decode step's few rows, where the build has the kernels for them
// (decode_gemv_cuda.hpp: GPU builds, bf16): each call returns whether it ran, and the model
// takes another way when it did not (a declined folded norm: the norm's own launch, then the
// call without it; otherwise the GEMMs of blas/gemm.hpp). The GEMMs stay the reference and the
// path of every other build, precision and batch.
#pragma once

#include <initializer_list>
#include <type_traits>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/decode_gemv_cuda.hpp"

namespace shardrl::kernels {

// The RMSNorm a call may fold in: x's rows normalised with these weights (k of them) first.
template <class T>
struct GemvNorm {
  const T* w = nullptr;   // nullptr: x as it is
  float eps = 0.0f;
};

// y_i (rows, n_i) = x (rows, k) w_i^T [+ add_i] for each product, sharing x; see GemvProduct.
// `weights`: whether they stay as they are through the step (GemvWeights).
template <class T>
bool decode_gemv([[maybe_unused]] const ExecSpace& space, [[maybe_unused]] int rows, [[maybe_unused]] int k,
                 [[maybe_unused]] const T* x, [[maybe_unused]] std::initializer_list<GemvProduct<T>> products,
                 [[maybe_unused]] GemvNorm<T> norm = {},
                 [[maybe_unused]] GemvWeights weights = GemvWeights::may_change) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<T, bf16>) {
    const int count = static_cast<int>(products.size());
    if (!decode_gemv_cuda_supports(rows, k, x, products.begin(), count, norm.w)) return false;
    decode_gemv_cuda(space.cuda_stream(), rows, k, x, products.begin(), count, norm.w, norm.eps, weights);
    return true;
  }
#endif
  return false;
}

// act (rows, n) = silu(x w_gate^T) * (x w_up^T), each product rounded to T first.
template <class T>
bool decode_gemv_swiglu([[maybe_unused]] const ExecSpace& space, [[maybe_unused]] int rows, [[maybe_unused]] int k,
                        [[maybe_unused]] const T* x, [[maybe_unused]] const T* w_gate,
                        [[maybe_unused]] const T* w_up, [[maybe_unused]] int n, [[maybe_unused]] T* act,
                        [[maybe_unused]] GemvNorm<T> norm = {},
                        [[maybe_unused]] GemvWeights weights = GemvWeights::may_change) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<T, bf16>) {
    const GemvProduct<bf16> both[2] = {{w_gate, act, nullptr, n}, {w_up, act, nullptr, n}};
    if (!decode_gemv_cuda_supports(rows, k, x, both, 2, norm.w)) return false;
    decode_gemv_swiglu_cuda(space.cuda_stream(), rows, k, x, w_gate, w_up, n, act, norm.w, norm.eps, weights);
    return true;
  }
#endif
  return false;
}

}  // namespace shardrl::kernels
