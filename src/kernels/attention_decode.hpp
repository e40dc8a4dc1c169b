// Attention of one new token per row against that row's KV cache (generation), and writing
// the new token's key and value into the cache. Same math as attention.hpp: GQA head mapping
// h -> h / (n_heads / n_kv_heads), scores scaled by 1/sqrt(hd), softmax in fp32.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_decode_cuda.hpp"
#include "kernels/cache_shape.hpp"

namespace shardrl::kernels {

// Row r of a step is sequence slots[r] of the cache (so finished sequences can leave the
// batch while the others keep their cache); with slots == nullptr, row r is sequence r.
//
// cache(entry(slot(r), positions[r]), g, :) = new(r, g, :) for the keys and the values.
template <class T>
void kv_cache_write(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                    const std::int32_t* positions,
                    const T* k, const T* v,   // (rows, n_kv_heads, hd)
                    T* k_cache, T* v_cache) {  // (entries, n_kv_heads, hd)
  const int G = s.n_kv_heads, hd = s.hd;
  const CacheShape cs = s;
  Kokkos::parallel_for(
      "kv_cache_write", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(s.rows) * G * hd),
      KOKKOS_LAMBDA(const long i) {
        const long r = i / (G * hd), rest = i % (G * hd);
        const long slot = slots ? slots[r] : r;
        const long dst = cs.entry(slot, positions[r]) * G * hd + rest;
        k_cache[dst] = k[i];
        v_cache[dst] = v[i];
      });
}

// out(r, h, :) = softmax_j(q(r,h,:) . k_cache(slot(r),j,g,:) / sqrt(hd)) v_cache(slot(r),j,g,:),
// j <= positions[r]. The portable kernel: every build, every type and head dim; the CPU's
// decode attention and the GPU kernel's reference.
template <class T>
void attention_decode_portable(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                               const std::int32_t* positions,
                               const T* q,                              // (rows, n_heads, hd)
                               const T* k_cache, const T* v_cache,      // (entries, n_kv_heads, hd)
                               T* out) {                                // (rows, n_heads, hd)
  SHARDRL_CHECK(s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0 && s.hd >= 1 && s.hd <= detail::kAttentionMaxHeadDim,
                "attention_decode: bad head shape");
  const int H = s.n_heads, G = s.n_kv_heads, hd = s.hd, group = H / G;
  const CacheShape cs = s;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // One team per (row, head): its threads score a chunk of cached positions at a time (one dot
  // product each), the chunk's softmax terms join the running maximum and sum, and each thread
  // then owns output dimensions d, summing p_j v(j, d) over the chunk with coalesced reads of v.
  // (One thread per (row, head) left all but rows x heads threads idle: at batch 1 this kernel
  // took a third of a llama-1b decode step.)
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Scratch = Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Entries = Kokkos::View<long*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  constexpr int kChunk = 128;
  const std::size_t scratch =
      Scratch::shmem_size(kChunk) + 2 * Scratch::shmem_size(hd) + Entries::shmem_size(kChunk);
  Kokkos::parallel_for(
      "attention_decode",
      Policy(space, s.rows * H, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(scratch)),
      KOKKOS_LAMBDA(const Policy::member_type& team) {
        const long rh = team.league_rank();
        const long r = rh / H, slot = slots ? slots[r] : r;
        const int g = static_cast<int>(rh % H) / group;
        Scratch p(team.team_scratch(0), kChunk), qs(team.team_scratch(0), hd), acc(team.team_scratch(0), hd);
        // The cache entries of the chunk's positions, looked up once (the block table, when
        // paged) by the scoring pass and read again by the values' pass.
        Entries entry(team.team_scratch(0), kChunk);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](const int d) {
          qs(d) = static_cast<float>(q[rh * hd + d]);
          acc(d) = 0.0f;
        });
        team.team_barrier();
        const long last = positions[r];
        float m = -INFINITY, l = 0.0f;
        for (long c0 = 0; c0 <= last; c0 += kChunk) {
          const int n = static_cast<int>(last + 1 - c0 < kChunk ? last + 1 - c0 : kChunk);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](const int j) {
            entry(j) = cs.entry(slot, c0 + j);
            const T* kj = k_cache + (entry(j) * G + g) * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; ++d) dot += qs(d) * static_cast<float>(kj[d]);
            p(j) = scale * dot;
          });
          team.team_barrier();
          float chunk_max = -INFINITY;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n), [&](const int j, float& mx) { mx = fmaxf(mx, p(j)); },
              Kokkos::Max<float>(chunk_max));
          const float new_m = fmaxf(m, chunk_max);
          const float correction = expf(m - new_m);   // 0 for the first chunk (m = -inf)
          float chunk_sum = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n),
              [&](const int j, float& sum) {
                const float e = expf(p(j) - new_m);
                p(j) = e;
                sum += e;
              },
              chunk_sum);
          team.team_barrier();
          l = l * correction + chunk_sum;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](const int d) {
            float a = acc(d) * correction;
            for (int j = 0; j < n; ++j) a += p(j) * static_cast<float>(v_cache[(entry(j) * G + g) * hd + d]);
            acc(d) = a;
          });
          team.team_barrier();
          m = new_m;
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hd), [&](const int d) { out[rh * hd + d] = T(acc(d) / l); });
      });
}

// The decode attention of the model: on GPU builds the CUDA kernel (attention_decode_cuda.hpp)
// for bf16 and the head dims it takes, split over long caches when given `split`, the portable
// one otherwise.
template <class T>
void attention_decode(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                      const std::int32_t* positions, const T* q, const T* k_cache, const T* v_cache, T* out,
                      const DecodeSplitWorkspace& split = {}) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<T, bf16>) {
    if (attention_decode_cuda_supports(s))
      return attention_decode_cuda(space.cuda_stream(), s, slots, positions, q, k_cache, v_cache, out, split);
  }
#endif
  (void)split;
  attention_decode_portable(space, s, slots, positions, q, k_cache, v_cache, out);
}

// The split workspace attention_decode takes for steps of up to s.rows rows: none where the
// portable kernel runs.
template <class T>
DecodeSplitSizes attention_decode_split_sizes(const CacheShape& s) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<T, bf16>) return attention_decode_cuda_split_sizes(s);
#endif
  (void)s;
  return {};
}

}  // namespace shardrl::kernels
