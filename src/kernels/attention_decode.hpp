// Attention of one new token per row against that row's KV cache (generation), and writing
// the new token's key and value into the cache. Same math as attention.hpp: GQA head mapping
// h -> h / (n_heads / n_kv_heads), scores scaled by 1/sqrt(hd), softmax in fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "kernels/attention.hpp"

namespace shardrl::kernels {

struct CacheShape {
  int rows = 1;        // rows of this step (each the new token of one sequence)
  int max_len = 1;     // positions the cache holds per row
  int n_heads = 1;
  int n_kv_heads = 1;
  int hd = 1;
};

// Row r of a step is sequence slots[r] of the cache (so finished sequences can leave the
// batch while the others keep their cache); with slots == nullptr, row r is slot r.
//
// cache(slot(r), positions[r], g, :) = new(r, g, :) for the keys and the values.
template <class T>
void kv_cache_write(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                    const std::int32_t* positions,
                    const T* k, const T* v,   // (rows, n_kv_heads, hd)
                    T* k_cache, T* v_cache) {  // (slots, max_len, n_kv_heads, hd)
  const int G = s.n_kv_heads, hd = s.hd, L = s.max_len;
  Kokkos::parallel_for(
      "kv_cache_write", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(s.rows) * G * hd),
      KOKKOS_LAMBDA(const long i) {
        const long r = i / (G * hd), rest = i % (G * hd);
        const long slot = slots ? slots[r] : r;
        const long dst = (slot * L + positions[r]) * G * hd + rest;
        k_cache[dst] = k[i];
        v_cache[dst] = v[i];
      });
}

// out(r, h, :) = softmax_j(q(r,h,:) . k_cache(slot(r),j,g,:) / sqrt(hd)) v_cache(slot(r),j,g,:),
// j <= positions[r].
template <class T>
void attention_decode(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                      const std::int32_t* positions,
                      const T* q,                              // (rows, n_heads, hd)
                      const T* k_cache, const T* v_cache,      // (rows, max_len, n_kv_heads, hd)
                      T* out) {                                // (rows, n_heads, hd)
  SHARDRL_CHECK(s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0 && s.hd >= 1 && s.hd <= detail::kAttentionMaxHeadDim,
                "attention_decode: bad head shape");
  const int H = s.n_heads, G = s.n_kv_heads, hd = s.hd, L = s.max_len, group = H / G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Kokkos::parallel_for(
      "attention_decode", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(s.rows) * H),
      KOKKOS_LAMBDA(const long rh) {
        const long r = rh / H, slot = slots ? slots[r] : r;
        const int g = static_cast<int>(rh % H) / group;
        const T* qr = q + rh * hd;
        float acc[detail::kAttentionMaxHeadDim];
        for (int d = 0; d < hd; ++d) acc[d] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        for (long j = 0; j <= positions[r]; ++j) {
          const long base = ((slot * L + j) * G + g) * hd;
          const float sc = scale * detail::attention_dot(qr, k_cache + base, hd);
          if (sc > m) {
            const float c = expf(m - sc);
            l *= c;
            for (int d = 0; d < hd; ++d) acc[d] *= c;
            m = sc;
          }
          const float p = expf(sc - m);
          l += p;
          for (int d = 0; d < hd; ++d) acc[d] += p * static_cast<float>(v_cache[base + d]);
        }
        for (int d = 0; d < hd; ++d) out[rh * hd + d] = T(acc[d] / l);
      });
}

}  // namespace shardrl::kernels
