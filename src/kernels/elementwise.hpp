// Element-wise helpers: cast between float and bf16, y += alpha * x, scale, fill.
#pragma once

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

// out[i] = To(in[i])   (bf16 <- float rounds to nearest even)
template <class From, class To>
void cast(const ExecSpace& space, const From* in, To* out, long count) {
  // Through float: exact for bf16 -> float and bf16 -> bf16, one rounding for float -> bf16.
  Kokkos::parallel_for(
      "cast", Kokkos::RangePolicy<ExecSpace>(space, 0, count),
      KOKKOS_LAMBDA(const long i) { out[i] = To(static_cast<float>(in[i])); });
}

// y[i] = y[i] + alpha * x[i], computed in fp32
template <class TX, class TY>
void add_scaled(const ExecSpace& space, const TX* x, TY* y, float alpha, long count) {
  Kokkos::parallel_for(
      "add_scaled", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        y[i] = TY(static_cast<float>(y[i]) + alpha * static_cast<float>(x[i]));
      });
}

// x[i] = alpha * x[i]
template <class T>
void scale(const ExecSpace& space, T* x, float alpha, long count) {
  Kokkos::parallel_for(
      "scale", Kokkos::RangePolicy<ExecSpace>(space, 0, count),
      KOKKOS_LAMBDA(const long i) { x[i] = T(alpha * static_cast<float>(x[i])); });
}

// x[i] = value. Zero goes through Kokkos' deep_copy, which sets memory (cudaMemsetAsync on GPUs):
// the plain kernel wrote zeros at about 650 GB/s on an H200, and the train step zeroes
// gradients every step (docs/performance.md).
template <class T>
void fill(const ExecSpace& space, T* x, float value, long count) {
  if (value == 0.0f && count > 0) {
    Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(x, static_cast<std::size_t>(count));
    Kokkos::deep_copy(space, v, T(0.0f));
    return;
  }
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) { x[i] = T(value); });
}

}  // namespace shardrl::kernels
