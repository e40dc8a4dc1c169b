// Token log-probabilities from logits (the LM head's output), in fp32:
//   lse(n) = logsumexp_v logits(n, v),  logp(n) = logits(n, target(n)) - lse(n).
// Cross-entropy is -logp; RL losses are functions of logp. Backward takes dL/dlogp per token
// (zero where the loss mask is zero) and returns dL/dlogits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

template <class T>
void token_logprob_forward(const ExecSpace& space,
                           const T* logits,                // (N, V)
                           const std::int32_t* targets,    // (N)
                           float* logp,                    // (N)
                           float* lse,                     // (N) saved for backward
                           int N, int V);

// dlogits(n, v) = dlogp(n) * (1[v == target(n)] - softmax(logits(n))_v)     (written)
template <class T>
void token_logprob_backward(const ExecSpace& space,
                            const T* logits,                // (N, V)
                            const std::int32_t* targets,    // (N)
                            const float* lse,               // (N)
                            const float* dlogp,             // (N)
                            T* dlogits,                     // (N, V)
                            int N, int V);

// Scaled masked negative log-likelihood, reduced on the device (no host synchronisation):
//   *loss += -scale * sum_n mask(n) * logp(n)       (accumulates into one float)
//   dlogp(n) = -scale * mask(n)                     (written)
// The caller picks scale, e.g. 1 / (tokens in the whole batch across micro-batches and ranks),
// so that sharded and unsharded runs compute the same mean.
void masked_nll(const ExecSpace& space,
                const float* logp,    // (N)
                const float* mask,    // (N), 0 or 1
                float scale,
                float* loss,          // (1)
                float* dlogp,         // (N)
                int N);

// ---------------------------------------------------------------------------------------------
// Definitions. Rows are long (the vocabulary), so the forward gives each row a team; the
// backward is elementwise once lse is known.

template <class T>
void token_logprob_forward(const ExecSpace& space, const T* logits, const std::int32_t* targets,
                           float* logp, float* lse, int N, int V) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "token_logprob_forward", Policy(space, N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T* row = logits + static_cast<long>(n) * V;
        // Subtracting the row max keeps every exp in (0, 1], whatever the logits' scale.
        float row_max = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](const int col, float& m) { m = fmaxf(m, static_cast<float>(row[col])); },
            Kokkos::Max<float>(row_max));
        float sum = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](const int col, float& acc) { acc += expf(static_cast<float>(row[col]) - row_max); }, sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const float l = row_max + logf(sum);
          lse[n] = l;
          logp[n] = static_cast<float>(row[targets[n]]) - l;
        });
      });
}

template <class T>
void token_logprob_backward(const ExecSpace& space, const T* logits, const std::int32_t* targets,
                            const float* lse, const float* dlogp, T* dlogits, int N, int V) {
  const long total = static_cast<long>(N) * V;
  Kokkos::parallel_for(
      "token_logprob_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, total), KOKKOS_LAMBDA(const long e) {
        const long n = e / V;
        const float hit = (e - n * V == targets[n]) ? 1.0f : 0.0f;
        dlogits[e] = T(dlogp[n] * (hit - expf(static_cast<float>(logits[e]) - lse[n])));
      });
}

// Defined inline here although declared without it: the kernels are header-only.

}  // namespace shardrl::kernels
