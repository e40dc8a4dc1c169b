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

// A step's rows and heads, and where the cache keeps each sequence's positions. Contiguous
// (block_table == nullptr): sequence s owns positions [s * max_len, s * max_len + max_len) of
// the cache. Paged: the cache is a pool of blocks of 2^block_shift positions, and position p of
// sequence s is at offset p mod 2^block_shift of block block_table[s * blocks_per_sequence +
// p >> block_shift], so sequences may share blocks (a prompt's, by its samples) and take blocks
// only as they grow.
struct CacheShape {
  int rows = 1;        // rows of this step (each the new token of one sequence)
  int max_len = 1;     // positions the cache holds per sequence
  int n_heads = 1;
  int n_kv_heads = 1;
  int hd = 1;
  const std::int32_t* block_table = nullptr;   // (sequences, blocks_per_sequence), or contiguous
  int blocks_per_sequence = 0;
  int block_shift = 0;

  // The cache entry (a position of the pool) of position `pos` of sequence `seq`.
  KOKKOS_INLINE_FUNCTION long entry(long seq, long pos) const {
    if (block_table == nullptr) return seq * max_len + pos;
    const long block = block_table[seq * blocks_per_sequence + (pos >> block_shift)];
    return (block << block_shift) + (pos & ((1L << block_shift) - 1));
  }
};

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
// j <= positions[r].
template <class T>
void attention_decode(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
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

}  // namespace shardrl::kernels
