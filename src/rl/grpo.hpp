// The policy-gradient token loss (device): the clipped surrogate with an optional importance
// weight (truncated importance sampling), a KL penalty to a reference policy by one of four
// estimators, and an entropy bonus. The kernel writes the gradient with respect to logp (and to
// the entropy), which the token log-prob backward (kernels/cross_entropy.hpp) turns into
// dL/dlogits, and accumulates its statistics on the device without a host synchronisation.
// Advantages are computed on the host (rl/advantage.hpp).
#pragma once

#include "core/kokkos.hpp"
#include "rl/loss_choices.hpp"

namespace shardrl {

struct GrpoLossOptions {
  float clip_low = 0.2f;    // ratio lower bound 1 - clip_low
  float clip_high = 0.2f;   // ratio upper bound 1 + clip_high
  float kl_coef = 0.0f;     // weight of the KL term to the reference policy in the loss (0: none)
  KlEstimator kl_estimator = KlEstimator::k3;
  float entropy_coef = 0.0f;   // weight of the entropy bonus (0: none)
};

// Accumulated on the device into stats[0..kGrpoStats) (the caller zeroes them). All are sums over
// the tokens with w > 0, except kGrpoRatioMax, a maximum:
enum GrpoStat {
  kGrpoLoss = 0,       // sum w * loss
  kGrpoKl = 1,         // sum w * kl        (0 without a reference)
  kGrpoClipped = 2,    // sum w * clipped
  kGrpoWeight = 3,     // sum w
  kGrpoRatioSum = 4,   // sum ratio         (unweighted: the ratio's mean over tokens)
  kGrpoTokens = 5,     // number of tokens
  kGrpoRatioMax = 6,   // max ratio
};
inline constexpr int kGrpoStats = 7;

// The KL estimator at d = logp - ref_logp (the log-ratio of the policy to the reference), and
// its derivative with respect to logp (Schulman's k1, k2, k3; verl's low_var_kl is k3 with the
// log-ratio clamped to [-20, 20] and the result to [-10, 10], zero gradient where a clamp acts):
//   k1 = d                      dk1 = 1
//   k2 = d^2 / 2                dk2 = d
//   k3 = e^-d + d - 1           dk3 = 1 - e^-d
KOKKOS_INLINE_FUNCTION void kl_estimate(KlEstimator estimator, float d, float& kl, float& dkl) {
  switch (estimator) {
    case KlEstimator::k1: kl = d; dkl = 1.0f; return;
    case KlEstimator::k2: kl = 0.5f * d * d; dkl = d; return;
    case KlEstimator::k3: {
      // expm1 keeps the absolute error at about u |d| as d -> 0 (e^-d - 1 would lose all of it);
      // em1 + d still cancels, so tiny KL values carry roughly u / |d| relative error.
      const float em1 = expm1f(-d);
      kl = em1 + d;
      dkl = -em1;
      return;
    }
    case KlEstimator::low_var_kl: {
      const float c = fminf(fmaxf(d, -20.0f), 20.0f);
      const float em1 = expm1f(-c);
      const float raw = em1 + c;
      kl = fminf(raw, 10.0f);   // raw >= 0: the lower clamp at -10 never acts
      dkl = (c != d || raw > 10.0f) ? 0.0f : -em1;
      return;
    }
  }
  kl = 0.0f;
  dkl = 0.0f;
}

// Per token n < N (all device pointers, fp32):
//   ratio = exp(logp[n] - old_logp[n]),  A = advantage[n],  w = weight[n]  (w == 0: not trained)
//   c = is_weight[n] (1 when is_weight == nullptr): the truncated importance weight
//   surrogate = min(ratio * A, clamp(ratio, 1 - clip_low, 1 + clip_high) * A)
//   kl = kl_estimate(logp[n] - ref_logp[n])    (only when ref_logp != nullptr, else 0)
//   H = entropy[n]                             (only when entropy != nullptr, else 0)
//   loss_n = -c * surrogate + kl_coef * kl - entropy_coef * H
//   dlogp[n] = w * d(loss_n)/d(logp[n])        written for every n (exactly 0 where w == 0)
//       d(-surrogate)/dlogp = -A * ratio when the unclipped term is the one selected by min, else 0
//   dentropy[n] = -w * entropy_coef            (when entropy != nullptr; 0 where w == 0)
//   clipped(n) = 1 when the clipped term is strictly the selected one (A > 0 and ratio > 1 + clip_high,
//               or A < 0 and ratio < 1 - clip_low), else 0
// and the statistics of GrpoStat. Tokens with w == 0 contribute nothing even when their inputs
// are NaN or inf (padding). The caller folds any normalisation into the weights.
void grpo_token_loss(const ExecSpace& space,
                     const float* logp,        // (N) current policy
                     const float* old_logp,    // (N) policy that sampled the rollouts
                     const float* ref_logp,    // (N) reference policy, or nullptr (no KL)
                     const float* advantage,   // (N) per token
                     const float* weight,      // (N) >= 0
                     const float* is_weight,   // (N) > 0, or nullptr (1)
                     const float* entropy,     // (N) the policy's entropy per token, or nullptr
                     const GrpoLossOptions& options, int N,
                     float* dlogp,             // (N) written
                     float* dentropy,          // (N) written when entropy != nullptr
                     float* stats);            // (kGrpoStats) accumulated

}  // namespace shardrl
