// Rotary position embedding, Hugging Face (Llama / Qwen3) convention: the head vector is split
// in halves, pairs (i, i + hd/2) are rotated by angle pos * theta^(-2i/hd), i < hd/2.
// In place. Backward is the rotation by the negative angle.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

namespace detail {

// Rotates every pair by sign * angle. The angle is formed exactly as HF does in fp32:
// inv_freq = 1 / theta^((2i)/hd), angle = pos * inv_freq, so positions far into a sequence
// get the same (rounded) angles as the reference model.
template <class T>
void rope_rotate(const ExecSpace& space, const char* name, T* x, const std::int32_t* positions, int N,
                 int n_heads, int hd, float theta, float sign) {
  SHARDRL_CHECK(hd % 2 == 0, "rope needs an even head dim, got " + std::to_string(hd));
  const int half = hd / 2;
  const long count = static_cast<long>(N) * n_heads * half;
  Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long p) {
    const long head = p / half;          // n * n_heads + h
    const int i = static_cast<int>(p - head * half);
    const long n = head / n_heads;
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
    const float angle = static_cast<float>(positions[n]) * inv_freq;
    const float c = cosf(angle);
    const float s = sign * sinf(angle);
    const long i0 = head * hd + i;
    const long i1 = i0 + half;
    const float x0 = static_cast<float>(x[i0]);
    const float x1 = static_cast<float>(x[i1]);
    x[i0] = T(x0 * c - x1 * s);
    x[i1] = T(x1 * c + x0 * s);
  });
}

}  // namespace detail

template <class T>
void rope_forward(const ExecSpace& space,
                  T* x,                           // (N, n_heads, hd), rotated in place
                  const std::int32_t* positions,  // (N)
                  int N, int n_heads, int hd, float theta) {
  detail::rope_rotate(space, "rope_forward", x, positions, N, n_heads, hd, theta, 1.0f);
}

template <class T>
void rope_backward(const ExecSpace& space,
                   T* dx,                          // (N, n_heads, hd), in place
                   const std::int32_t* positions,  // (N)
                   int N, int n_heads, int hd, float theta) {
  detail::rope_rotate(space, "rope_backward", dx, positions, N, n_heads, hd, theta, -1.0f);
}

}  // namespace shardrl::kernels
