// A decode step's per-head work between the q, k, v products and the attention, in one launch:
// each head of the new token is normalised (Qwen3's q_norm / k_norm, when the model has them) and
// rotated (RoPE); the keys, with the values, then go into the row's cache. The arithmetic per
// element is that of rmsnorm_forward, rope_forward and kv_cache_write, through their shared
// element functions (the norm's sum of squares is reduced in another order). Why one launch: at
// batch 1 those five launches a layer (two norms, two rotations, the cache write) took 0.7 of a
// 1.8 ms qwen3-0.6b step, each a few microseconds of launch and tail for a few hundred elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "kernels/cache_shape.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"

namespace shardrl::kernels {

// q (rows, n_heads, hd) = rope(norm_q(q_raw)); cache(entry(slot(r), positions[r]), g, :) =
// rope(norm_k(k_raw(r, g, :))) for the keys and v(r, g, :) for the values, with slot(r) = slots ?
// slots[r] : r. norm_x(h) = h / rms(h) * w_x (rounded to T) where w_x is given; without norm
// weights the heads are only rotated. `table` is rope_table's (rows, hd). q may be q_raw (in
// place): a thread reads its pair (i, i + hd/2) before writing it. Row r of q_raw, k_raw and v
// starts at r * in_row_stride of each when in_row_stride > 0 (the rows of one product's
// (q | k | v) output), at r * n_heads * hd and r * n_kv_heads * hd when 0 (buffers of their own).
template <class T>
void qk_rope_cache_write(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                         const std::int32_t* positions,
                         const T* q_raw, const T* k_raw, const T* v,   // (rows, n_heads | n_kv_heads, hd)
                         const T* q_norm, const T* k_norm,             // (hd) each, or both nullptr
                         float eps, const float* table,                // (rows, hd)
                         T* q,                                         // (rows, n_heads, hd)
                         T* k_cache, T* v_cache,                       // (entries, n_kv_heads, hd)
                         long in_row_stride = 0) {
  SHARDRL_CHECK(s.hd % 2 == 0, "qk_rope_cache_write: rope needs an even head dim, got " + std::to_string(s.hd));
  SHARDRL_CHECK((q_norm == nullptr) == (k_norm == nullptr), "qk_rope_cache_write: both norms or neither");
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  const int H = s.n_heads, G = s.n_kv_heads, hd = s.hd, half = hd / 2;
  const CacheShape cs = s;
  const bool normed = q_norm != nullptr;
  const long q_stride = in_row_stride > 0 ? in_row_stride : long(H) * hd;
  const long kv_stride = in_row_stride > 0 ? in_row_stride : long(G) * hd;
  // One team per (row, head): the query heads, then the key heads. A thread takes rotation
  // pairs (i, i + hd/2).
  Kokkos::parallel_for(
      "qk_rope_cache_write", Policy(space, s.rows * (H + G), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Policy::member_type& team) {
        const int item = team.league_rank();
        const long r = item / (H + G);
        const int head = item % (H + G);
        const bool is_key = head >= H;
        const int g = head - H;
        const T* x = is_key ? k_raw + r * kv_stride + g * hd : q_raw + r * q_stride + head * hd;
        const T* w = is_key ? k_norm : q_norm;
        float scale = 1.0f;
        if (normed) {
          float sum_sq = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, half),
              [&](const int i, float& acc) {
                const float a = static_cast<float>(x[i]), b = static_cast<float>(x[i + half]);
                acc += a * a + b * b;
              },
              sum_sq);
          scale = detail::rmsnorm_scale(sum_sq, hd, eps);
        }
        const float* c = table + r * hd;
        T* out;
        if (is_key) {
          const long at = cs.entry(slots ? slots[r] : r, positions[r]) * G * hd + static_cast<long>(g) * hd;
          out = k_cache + at;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd),
                               [&](const int d) { v_cache[at + d] = v[r * kv_stride + g * hd + d]; });
        } else {
          out = q + (r * H + head) * hd;
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, half), [&](const int i) {
          // The normalised head as rmsnorm_forward rounds it, then rope_forward's rotation.
          const T a = normed ? detail::rmsnorm_element(x[i], scale, w[i]) : x[i];
          const T b = normed ? detail::rmsnorm_element(x[i + half], scale, w[i + half]) : x[i + half];
          detail::rotate_pair(static_cast<float>(a), static_cast<float>(b), c[i], c[half + i], out[i], out[i + half]);
        });
      });
}

}  // namespace shardrl::kernels
