// Token log-probabilities from logits (the LM head's output) under the distribution at
// temperature T, in fp32:
//   z(n, v) = logits(n, v) / T,  lse(n) = logsumexp_v z(n, v),  logp(n) = z(n, target(n)) - lse(n),
//   entropy(n) = -sum_v p(n, v) log p(n, v)  with p = softmax(z(n, :))      (optional)
// Cross-entropy is -logp at T = 1; RL losses are functions of logp (and of the entropy), at the
// temperature the rollout sampled with, so the importance ratio compares the policy that sampled.
// Backward takes dL/dlogp (and dL/dentropy) per token, zero where nothing is trained, and returns
// dL/dlogits.
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
                           float temperature,              // > 0
                           float* logp,                    // (N)
                           float* lse,                     // (N) of z; saved for backward
                           float* entropy,                 // (N), or nullptr: not computed
                           int N, int V);

// With log p(n, v) = z(n, v) - lse(n) and H(n) = entropy(n):
//   dlogits(n, v) = (1/T) * ( dlogp(n) * (1[v == target(n)] - p(n, v))
//                             - dentropy(n) * p(n, v) * (log p(n, v) + H(n)) )         (written)
// `entropy` and `dentropy` are both given (the forward's entropy) or both nullptr (no entropy term).
template <class T>
void token_logprob_backward(const ExecSpace& space,
                            const T* logits,                // (N, V)
                            const std::int32_t* targets,    // (N)
                            float temperature,
                            const float* lse,               // (N)
                            const float* dlogp,             // (N)
                            const float* entropy,           // (N), or nullptr
                            const float* dentropy,          // (N), or nullptr
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
void token_logprob_forward(const ExecSpace& space, const T* logits, const std::int32_t* targets, float temperature,
                           float* logp, float* lse, float* entropy, int N, int V) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "token_logprob_forward", Policy(space, N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T* row = logits + static_cast<long>(n) * V;
        // Subtracting the row max keeps every exp in (0, 1], whatever the logits' scale. The
        // sampler (rollout/sampling_impl.hpp) forms (logit - max) / T the same way.
        float row_max = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](const int col, float& m) { m = fmaxf(m, static_cast<float>(row[col])); },
            Kokkos::Max<float>(row_max));
        float sum = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](const int col, float& acc) { acc += expf((static_cast<float>(row[col]) - row_max) / temperature); },
            sum);
        // H = log(sum) - sum_v e_v s_v / sum with s_v = (logit - max) / T and e_v = exp(s_v).
        float weighted = 0.0f;
        if (entropy != nullptr)
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, V),
              [&](const int col, float& acc) {
                const float s = (static_cast<float>(row[col]) - row_max) / temperature;
                acc += expf(s) * s;
              },
              weighted);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const float log_sum = logf(sum);
          lse[n] = row_max / temperature + log_sum;
          logp[n] = (static_cast<float>(row[targets[n]]) - row_max) / temperature - log_sum;
          if (entropy != nullptr) entropy[n] = log_sum - weighted / sum;
        });
      });
}

template <class T>
void token_logprob_backward(const ExecSpace& space, const T* logits, const std::int32_t* targets, float temperature,
                            const float* lse, const float* dlogp, const float* entropy, const float* dentropy,
                            T* dlogits, int N, int V) {
  const long total = static_cast<long>(N) * V;
  const bool with_entropy = dentropy != nullptr;
  Kokkos::parallel_for(
      "token_logprob_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, total), KOKKOS_LAMBDA(const long e) {
        const long n = e / V;
        const float hit = (e - n * V == targets[n]) ? 1.0f : 0.0f;
        const float log_p = static_cast<float>(logits[e]) / temperature - lse[n];
        const float p = expf(log_p);
        float d = dlogp[n] * (hit - p);
        if (with_entropy) d -= dentropy[n] * p * (log_p + entropy[n]);
        dlogits[e] = T(d / temperature);
      });
}

// Defined inline here although declared without it: the kernels are header-only.

}  // namespace shardrl::kernels
