// Token embedding: forward is a row gather, backward a deterministic scatter-add into the fp32
// gradient. T is the activation/weight type (float or bf16); gradients are always fp32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/rows.hpp"

namespace shardrl::kernels {

// out(n, :) = W(tokens(n), :): a row gather (kernels/rows.hpp).
template <class T>
void embedding_forward(const ExecSpace& space,
                       const std::int32_t* tokens,   // (N)
                       const T* W,                   // (V, D)
                       T* out,                       // (N, D)
                       int N, int D) {
  gather_rows(space, W, tokens, out, N, D);
}

// out(n, :) = the part of W(tokens(n), :) in a rank's slice of the table: the elements of (V, D),
// flat, in [lo, hi) (a slice may cut rows) from slice[e - lo], zeros elsewhere and for ids outside
// [0, V). The ranks' slices tile the table, so the sum of every rank's out (a reduce-scatter) is
// the lookup itself, exactly: each element has one nonzero term. Lets ranks embed their tokens
// without gathering the table (fsdp/sharded_trainer_lookup.cpp).
template <class T>
void embedding_forward_owned(const ExecSpace& space,
                             const std::int32_t* tokens,   // (N)
                             const T* slice,               // W's flat elements [lo, hi)
                             long lo, long hi, int V,
                             T* out,   // (N, D)
                             int N, int D) {
  const long count = static_cast<long>(N) * D;
  Kokkos::parallel_for(
      "embedding_forward_owned", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const long n = i / D;
        const long id = tokens[n];
        const long e = id * D + (i - n * D);
        out[i] = (id >= 0 && id < V && e >= lo && e < hi) ? slice[e - lo] : T(0.0f);
      });
}

// The batch's tokens grouped by id, for embedding_backward; built on the host when the batch is
// set. order: the N positions sorted by (token id, position). starts[k] .. starts[k+1]: group k's
// range in `order` (starts has room for N + 1 entries, of which groups + 1 are used). Returns
// the number of groups (distinct ids).
inline int group_tokens(const std::int32_t* tokens, int N, std::int32_t* order, std::int32_t* starts) {
  std::iota(order, order + N, 0);
  std::stable_sort(order, order + N, [&](std::int32_t a, std::int32_t b) { return tokens[a] < tokens[b]; });
  int groups = 0;
  for (int i = 0; i < N; ++i)
    if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) starts[groups++] = i;
  starts[groups] = N;
  return groups;
}

// Group k's rows of dout summed in position order at column d (fp32): the one order in which an
// embedding's lookup gradient is ever summed.
template <class T>
KOKKOS_INLINE_FUNCTION float group_row_sum(const std::int32_t* order, int begin, int end, const T* dout, int D,
                                           int d) {
  float sum = 0.0f;
  for (int i = begin; i < end; ++i) sum += static_cast<float>(dout[static_cast<long>(order[i]) * D + d]);
  return sum;
}

// dW(tokens(n), :) += dout(n, :)   (accumulates: dW is the persistent fp32 gradient)
// One team per distinct token (group_tokens' groups): it sums the rows of that token's
// positions in position order and adds the sum once. No atomics, so the result is the same bits
// on every run and every device, repeats included. The launch has N teams whatever the count
// of groups (read on the device), so its shape depends only on the batch's size.
template <class T>
void embedding_backward(const ExecSpace& space,
                        const std::int32_t* tokens,   // (N)
                        const std::int32_t* order,    // (N), from group_tokens
                        const std::int32_t* starts,   // (groups + 1), from group_tokens
                        const std::int32_t* groups,   // one value: the count of groups
                        const T* dout,                // (N, D)
                        float* dW,                    // (V, D)
                        int N, int D) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  if (N <= 0) return;
  Kokkos::parallel_for(
      "embedding_backward", Kokkos::TeamPolicy<ExecSpace>(space, N, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int k = team.league_rank();
        if (k >= *groups) return;
        const int begin = starts[k], end = starts[k + 1];
        const long row = static_cast<long>(tokens[order[begin]]) * D;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, D),
                             [&](const int d) { dW[row + d] += group_row_sum(order, begin, end, dout, D, d); });
      });
}

// The lookup gradient as rows instead of a (V, D) table: ids[k] = group k's token and
// rows(k, :) = its positions' rows of dout summed as embedding_backward sums them, for k below
// the count of groups; ids[k] = -1 for the rest of the N entries (rows not written). Sorted by
// id, each id once: what a rank sends when the ranks exchange their lookups' rows rather than
// reduce-scatter a vocabulary-sized gradient (fsdp/sharded_trainer.cpp).
template <class T>
void embedding_backward_rows(const ExecSpace& space, const std::int32_t* tokens, const std::int32_t* order,
                             const std::int32_t* starts, const std::int32_t* groups, const T* dout,
                             std::int32_t* ids,   // (N)
                             float* rows,         // (N, D)
                             int N, int D) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  if (N <= 0) return;
  Kokkos::parallel_for(
      "embedding_backward_rows", Kokkos::TeamPolicy<ExecSpace>(space, N, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int k = team.league_rank();
        if (k >= *groups) {
          Kokkos::single(Kokkos::PerTeam(team), [&]() { ids[k] = -1; });
          return;
        }
        const int begin = starts[k], end = starts[k + 1];
        Kokkos::single(Kokkos::PerTeam(team), [&]() { ids[k] = tokens[order[begin]]; });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, D), [&](const int d) {
          rows[static_cast<long>(k) * D + d] = group_row_sum(order, begin, end, dout, D, d);
        });
      });
}

// dW(ids[k] * D + d - lo) += rows(k, d) for the elements of (V, D) in [lo, hi) (a rank's slice of
// the table, which may cut rows), skipping ids of -1. Each id at most once in `ids`, so no
// atomics: called once per rank in rank order, the sums are the same bits on every run.
inline void embedding_rows_add(const ExecSpace& space, const std::int32_t* ids, const float* rows, int N, int D,
                               long lo, long hi, float* dW) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  if (N <= 0) return;
  Kokkos::parallel_for(
      "embedding_rows_add", Kokkos::TeamPolicy<ExecSpace>(space, N, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int k = team.league_rank();
        const long id = ids[k];
        if (id < 0 || (id + 1) * D <= lo || id * D >= hi) return;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, D), [&](const int d) {
          const long e = id * D + d;
          if (e >= lo && e < hi) dW[e - lo] += rows[static_cast<long>(k) * D + d];
        });
      });
}

}  // namespace shardrl::kernels
