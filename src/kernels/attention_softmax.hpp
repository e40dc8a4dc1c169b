// The row-wise parts of causal attention computed on materialised scores. The model's attention
// (src/model/gemm_attention.cpp) runs its products as batched GEMMs, which use the tensor cores, and
// these kernels between them: the masked softmax forward, its recomputation in backward, and
// the softmax's backward. Tokens, positions and the causal/packing rule are those of
// kernels/attention.hpp.
//
// A block is one row b of the batch and one key/value head g: its `group` query heads
// h = g * group + r (r = 0 .. group-1), each with S query tokens. Scores and probabilities of a
// block are (group, S, S) row-major: row (r, n) holds query token n's values against the S key
// slots of row b. Slots outside n's sequence, or after n, get probability exactly 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

struct AttentionBlock {
  int S = 1;         // token slots per row
  int n_heads = 1;   // query heads (H); lse is (B*S, H)
  int group = 1;     // query heads per key/value head
  int b = 0;         // row of the batch
  int g = 0;         // key/value head
};

// What a block's row (r, n) is about: query token n (slot in the row), its head h, its token
// index t in the batch, and the first slot of its sequence (the row's keys j in [first, n]).
struct AttentionRow {
  int n, h, first;
  long t;
};
KOKKOS_INLINE_FUNCTION AttentionRow attention_row(const AttentionBlock& blk, long row, const std::int32_t* positions) {
  AttentionRow a;
  a.n = static_cast<int>(row % blk.S);
  a.h = blk.g * blk.group + static_cast<int>(row / blk.S);
  a.t = static_cast<long>(blk.b) * blk.S + a.n;
  a.first = a.n - positions[a.t];
  return a;
}

// probs(r, n, j) = exp(scale * scores(r, n, j) - lse(n, h)) over n's keys j, 0 elsewhere;
// lse(n, h) = logsumexp_j of scale * scores over the same keys (saved for backward).
template <class T>
void attention_softmax_forward(const ExecSpace& space, const AttentionBlock& blk, const std::int32_t* positions,
                               float scale, const float* scores, T* probs, float* lse) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int S = blk.S, H = blk.n_heads;
  Kokkos::parallel_for(
      "attention_softmax_forward", Kokkos::TeamPolicy<ExecSpace>(space, blk.group * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long row = team.league_rank();   // r * S + n
        const AttentionRow a = attention_row(blk, row, positions);
        const int n = a.n, first = a.first;
        const float* sr = scores + row * S;
        // One pass over the scores: each thread keeps a running max and a sum of exponentials
        // rescaled whenever its max grows; then the team combines them (max, then the sums
        // rescaled to the team's max). A thread with no keys keeps (-inf, 0) and adds 0.
        float m_t = -INFINITY, l_t = 0.0f;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, first, n + 1), [&](const int j) {
          const float x = sr[j];
          if (x > m_t) {
            l_t = l_t * expf(scale * (m_t - x)) + 1.0f;
            m_t = x;
          } else {
            l_t += expf(scale * (x - m_t));
          }
        });
        float mx = m_t;
        team.team_reduce(Kokkos::Max<float>(mx));
        float sum = l_t > 0.0f ? l_t * expf(scale * (m_t - mx)) : 0.0f;
        team.team_reduce(Kokkos::Sum<float>(sum));
        const float l = scale * mx + logf(sum);   // scale > 0: the max of scale * s is scale * max s
        T* pr = probs + row * S;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const int j) {
          pr[j] = (j >= first && j <= n) ? T(expf(scale * sr[j] - l)) : T(0.0f);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { lse[a.t * H + a.h] = l; });
      });
}

// The forward's probabilities again, from the same scores and the saved lse: bit-identical.
// Masked slots are written as 0 without reading their scores (about half of a causal block).
template <class T>
void attention_softmax_recompute(const ExecSpace& space, const AttentionBlock& blk, const std::int32_t* positions,
                                 float scale, const float* scores, const float* lse, T* probs) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int S = blk.S, H = blk.n_heads;
  Kokkos::parallel_for(
      "attention_softmax_recompute", Kokkos::TeamPolicy<ExecSpace>(space, blk.group * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long row = team.league_rank();
        const AttentionRow a = attention_row(blk, row, positions);
        const float l = lse[a.t * H + a.h];
        const float* sr = scores + row * S;
        T* pr = probs + row * S;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const int j) {
          pr[j] = (j >= a.first && j <= a.n) ? T(expf(scale * sr[j] - l)) : T(0.0f);
        });
      });
}

// dscores(r, n, j) = probs(r, n, j) * (dprobs(r, n, j) - D(n, h)), D = dout(n, h, :) . out(n, h, :)
// (which equals sum_j probs * dprobs), written over probs. Masked slots are written as 0
// without reading anything.
template <class T>
void attention_softmax_backward(const ExecSpace& space, const AttentionBlock& blk, int hd, const std::int32_t* positions,
                                const T* out, const T* dout, const float* dprobs, T* probs_to_dscores) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int S = blk.S, H = blk.n_heads;
  Kokkos::parallel_for(
      "attention_softmax_backward", Kokkos::TeamPolicy<ExecSpace>(space, blk.group * S, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long row = team.league_rank();
        const AttentionRow a = attention_row(blk, row, positions);
        const long base = (a.t * H + a.h) * hd;
        float D = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, hd),
            [&](const int d, float& acc) { acc += static_cast<float>(dout[base + d]) * static_cast<float>(out[base + d]); },
            D);
        const float* dpr = dprobs + row * S;
        T* pr = probs_to_dscores + row * S;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const int j) {
          pr[j] = (j >= a.first && j <= a.n) ? T(static_cast<float>(pr[j]) * (dpr[j] - D)) : T(0.0f);
        });
      });
}

// dst(n, g, :) = sum over the group's heads r of acc(r, n, :): the key or value gradient of
// block (b, g) from its per-head products, summed in a fixed order. acc is (group, S, hd) fp32;
// dst is the (B*S, n_kv_heads, hd) tensor.
template <class T>
void attention_sum_group(const ExecSpace& space, const AttentionBlock& blk, int n_kv_heads, int hd, const float* acc,
                         T* dst) {
  const int S = blk.S, group = blk.group;
  const long token0 = static_cast<long>(blk.b) * S;
  const long head_stride = static_cast<long>(S) * hd;
  const long kv_row = static_cast<long>(n_kv_heads) * hd, offset = static_cast<long>(blk.g) * hd;
  Kokkos::parallel_for(
      "attention_sum_group", Kokkos::RangePolicy<ExecSpace>(space, 0, head_stride), KOKKOS_LAMBDA(const long i) {
        float sum = 0.0f;
        for (int r = 0; r < group; ++r) sum += acc[r * head_stride + i];
        const long n = i / hd, d = i % hd;
        dst[(token0 + n) * kv_row + offset + d] = T(sum);
      });
}

}  // namespace shardrl::kernels
