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
#include "kernels/packed.hpp"

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

// The rotation of every (token, pair) of a batch: table (N, hd) in fp32, row n holding
// cos(angle_0..angle_{hd/2-1}) then sin(angle_0..angle_{hd/2-1}), angle_i = positions[n] *
// inv_freq(i) formed exactly as HF does in fp32, so positions far into a sequence get the same
// (rounded) angles as the reference model. The model forms it once per batch (the embedding's
// forward) for every layer's queries and keys, forward and backward, instead of a powf, a sinf and
// a cosf (of angles up to thousands of radians) per element of every layer.
inline void rope_table(const ExecSpace& space, const std::int32_t* positions, int N, int hd, RopeFrequencies freq,
                       float* table) {
  SHARDRL_CHECK(hd % 2 == 0, "rope needs an even head dim, got " + std::to_string(hd));
  const int half = hd / 2;
  Kokkos::parallel_for(
      "rope_table", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * half), KOKKOS_LAMBDA(const long p) {
        const long n = p / half;
        const int i = static_cast<int>(p - n * half);
        const float angle = static_cast<float>(positions[n]) * freq.inv_freq(i, hd);
        table[n * hd + i] = cosf(angle);
        table[n * hd + half + i] = sinf(angle);
      });
}

namespace detail {

// One pair (a, b) = (x_i, x_{i + hd/2}) rotated by the angle of cosine c and sine s: what every
// kernel that rotates heads (here, and the decode step's kernels/qk_rope_cache.hpp) computes.
template <class T>
KOKKOS_INLINE_FUNCTION void rotate_pair(float a, float b, float c, float s, T& lo, T& hi) {
  lo = T(a * c - b * s);
  hi = T(b * c + a * s);
}

// Rotates every pair (i, i + hd/2) of every head by sign * angle, from the table. A work item
// takes a pack of consecutive pairs (8 for bf16) where the half head allows, else one pair.
template <class T>
void rope_rotate(const ExecSpace& space, const char* name, T* x, const float* table, int N, int n_heads, int hd,
                 float sign) {
  SHARDRL_CHECK(hd % 2 == 0, "rope needs an even head dim, got " + std::to_string(hd));
  const int half = hd / 2;
  const bool packed = packs_aligned(x) && half % Packed<T>::width == 0;
  const int width = packed ? Packed<T>::width : 1;
  const int groups = half / width;   // work items per head
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * n_heads * groups),
      KOKKOS_LAMBDA(const long item) {
        const long head = item / groups;   // n * n_heads + h
        const int i = static_cast<int>(item - head * groups) * width;
        const long n = head / n_heads;
        const float* c = table + n * hd + i;
        const float* s = c + half;
        T* x0 = x + head * hd + i;
        T* x1 = x0 + half;
        if (width == 1) {
          rotate_pair(static_cast<float>(*x0), static_cast<float>(*x1), c[0], sign * s[0], *x0, *x1);
          return;
        }
        const Packed<T> a = load_packed(x0), b = load_packed(x1);
        Packed<T> ra, rb;
        for (int j = 0; j < Packed<T>::width; ++j) {
          rotate_pair(static_cast<float>(a.v[j]), static_cast<float>(b.v[j]), c[j], sign * s[j], ra.v[j], rb.v[j]);
        }
        store_packed(x0, ra);
        store_packed(x1, rb);
      });
}

}  // namespace detail

template <class T>
void rope_forward(const ExecSpace& space,
                  T* x,                // (N, n_heads, hd), rotated in place
                  const float* table,  // (N, hd) from rope_table
                  int N, int n_heads, int hd) {
  detail::rope_rotate(space, "rope_forward", x, table, N, n_heads, hd, 1.0f);
}

template <class T>
void rope_backward(const ExecSpace& space,
                   T* dx,               // (N, n_heads, hd), in place
                   const float* table,  // (N, hd) from rope_table
                   int N, int n_heads, int hd) {
  detail::rope_rotate(space, "rope_backward", dx, table, N, n_heads, hd, -1.0f);
}

}  // namespace shardrl::kernels
