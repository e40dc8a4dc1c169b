// GRPO math: group-normalised advantages (host) and the token-level clipped surrogate loss with
// an optional k3 KL penalty to a reference policy (device). The loss kernel writes the gradient
// with respect to logp, which the token log-prob backward (kernels/cross_entropy.hpp) turns into
// dL/dlogits, and accumulates its statistics on the device without a host synchronisation.
#pragma once

#include <vector>

#include "core/kokkos.hpp"

namespace shardrl {

// Group-normalised advantages. rewards: n_groups * group_size values, group-major (the samples of
// one prompt are consecutive). advantage = (r - mean_group) / (std_group + eps) when scale_by_std,
// else r - mean_group. std is the unbiased sample std (divide by G-1); for G == 1 every advantage
// is 0. All-equal rewards in a group give exactly 0 (such a group carries no learning signal).
std::vector<float> group_advantages(const std::vector<double>& rewards, int group_size, bool scale_by_std,
                                    double eps);

struct GrpoLossOptions {
  float clip_low = 0.2f;    // ratio lower bound 1 - clip_low
  float clip_high = 0.2f;   // ratio upper bound 1 + clip_high
  float kl_coef = 0.0f;     // weight of the k3 KL estimator to the reference policy (0: off)
};

// Accumulated on the device into stats[0..3] (the caller zeroes them):
enum GrpoStat { kGrpoLoss = 0, kGrpoKl = 1, kGrpoClipped = 2, kGrpoWeight = 3 };
inline constexpr int kGrpoStats = 4;

// Per token n < N (all device pointers, fp32):
//   ratio = exp(logp[n] - old_logp[n]),  A = advantage[n],  w = weight[n]  (w == 0: not trained)
//   surrogate = min(ratio * A, clamp(ratio, 1 - clip_low, 1 + clip_high) * A)
//   kl = exp(ref - logp) - (ref - logp) - 1       (k3; only when ref_logp != nullptr, else 0)
//   loss_n = -surrogate + kl_coef * kl
//   dlogp[n] = w * d(loss_n)/d(logp[n])           written for every n (exactly 0 where w == 0)
//       d(-surrogate)/dlogp = -A * ratio when the unclipped term is the one selected by min, else 0
//       d(kl)/dlogp = 1 - exp(ref - logp)
//   clipped(n) = 1 when the clipped term is strictly the selected one (A > 0 and ratio > 1 + clip_high,
//               or A < 0 and ratio < 1 - clip_low), else 0
//   stats[kGrpoLoss] += sum_n w*loss_n;  stats[kGrpoKl] += sum_n w*kl;
//   stats[kGrpoClipped] += sum_n w*clipped(n);  stats[kGrpoWeight] += sum_n w
// Tokens with w == 0 contribute nothing even when their inputs are NaN or inf (padding). The
// caller folds any normalisation (e.g. 1 / tokens in the batch) into the weights.
void grpo_token_loss(const ExecSpace& space,
                     const float* logp,        // (N) current policy
                     const float* old_logp,    // (N) policy that sampled the rollouts
                     const float* ref_logp,    // (N) reference policy, or nullptr (no KL)
                     const float* advantage,   // (N) the sequence's advantage, per token
                     const float* weight,      // (N) >= 0
                     const GrpoLossOptions& options, int N,
                     float* dlogp,             // (N) written
                     float* stats);            // (kGrpoStats) accumulated

}  // namespace shardrl
