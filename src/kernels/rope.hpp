// Rotary position embedding, Hugging Face (Llama / Qwen3) convention: the head vector is split
// in halves, pairs (i, i + hd/2) are rotated by angle pos * inv_freq(i), i < hd/2, with
// inv_freq(i) = theta^(-2i/hd), or with Llama 3's frequency scaling (rope_type "llama3") those
// frequencies adjusted by wavelength as transformers' _compute_llama3_parameters does. In place.
// Backward is the rotation by the negative angle.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

// The rotation frequencies of a model (its ModelShape's RoPE fields).
struct RopeFrequencies {
  float theta = 10000.0f;
  // Llama 3 scaling: 0 for plain RoPE; else the factor long wavelengths are divided by.
  float scaling_factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position = 8192.0f;

  // In fp32, as transformers computes it: inv_freq = 1 / theta^((2i)/hd); with llama3 scaling,
  // wavelengths 2 pi / inv_freq below original / high_freq_factor stay, those above original /
  // low_freq_factor are divided by the factor, and those between are interpolated.
  KOKKOS_INLINE_FUNCTION float inv_freq(int i, int hd) const {
    const float f = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
    if (scaling_factor <= 0.0f) return f;
    const float wavelen = 2.0f * 3.14159265358979323846f / f;
    if (wavelen < original_max_position / high_freq_factor) return f;
    if (wavelen > original_max_position / low_freq_factor) return f / scaling_factor;
    const float smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0f - smooth) * f / scaling_factor + smooth * f;
  }
};

namespace detail {

// Rotates every pair by sign * angle. The angle is formed exactly as HF does in fp32:
// angle = pos * inv_freq, so positions far into a sequence get the same (rounded) angles as the
// reference model.
template <class T>
void rope_rotate(const ExecSpace& space, const char* name, T* x, const std::int32_t* positions, int N,
                 int n_heads, int hd, RopeFrequencies freq, float sign) {
  SHARDRL_CHECK(hd % 2 == 0, "rope needs an even head dim, got " + std::to_string(hd));
  const int half = hd / 2;
  const long count = static_cast<long>(N) * n_heads * half;
  Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long p) {
    const long head = p / half;          // n * n_heads + h
    const int i = static_cast<int>(p - head * half);
    const long n = head / n_heads;
    const float angle = static_cast<float>(positions[n]) * freq.inv_freq(i, hd);
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
                  int N, int n_heads, int hd, const RopeFrequencies& freq) {
  detail::rope_rotate(space, "rope_forward", x, positions, N, n_heads, hd, freq, 1.0f);
}

template <class T>
void rope_backward(const ExecSpace& space,
                   T* dx,                          // (N, n_heads, hd), in place
                   const std::int32_t* positions,  // (N)
                   int N, int n_heads, int hd, const RopeFrequencies& freq) {
  detail::rope_rotate(space, "rope_backward", dx, positions, N, n_heads, hd, freq, -1.0f);
}

}  // namespace shardrl::kernels
