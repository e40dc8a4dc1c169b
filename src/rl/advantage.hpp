// Advantage estimators (host, fp64 inside): what each completion token's policy-gradient term is
// weighted by. Rewards are group-major: the G samples of one prompt are consecutive (a group is
// never split across ranks). The sequence estimators give one value per completion; REINFORCE++
// gives one per token, whitened over the global batch (moments summed over the ranks).
#pragma once

#include <vector>

#include "rl/loss_choices.hpp"

namespace shardrl {

// grpo and dr_grpo: advantage = (r - mean_group) / (std_group + eps) when scale_by_std (GRPO),
// else r - mean_group (Dr. GRPO). std is the unbiased sample std (divide by G-1). A group whose
// rewards are all equal (G == 1 included) gives exactly 0: it carries no learning signal.
std::vector<float> group_advantages(const std::vector<double>& rewards, int group_size, bool scale_by_std,
                                    double eps);

// RLOO (Ahmadian et al. 2024): advantage_i = r_i - mean of the group's other G-1 rewards
// = G/(G-1) (r_i - mean_group). G == 1 or all-equal rewards give exactly 0.
std::vector<float> rloo_advantages(const std::vector<double>& rewards, int group_size);

// The sequence reward with a token-level KL penalty folded in (rl.kl_in_reward, as verl's
// use_kl_in_reward): r - kl_coef * sum_t kl_t.
double reward_with_kl(double reward, const std::vector<double>& kl, double kl_coef);

// REINFORCE++ (Hu 2025) returns, undiscounted: the outcome reward at the last token and the
// per-token penalty -kl_coef * kl_t, summed from t to the end: G_t = r - kl_coef * sum_{s>=t} kl_s.
// Empty for a completion of no tokens.
std::vector<double> token_returns(double reward, const std::vector<double>& kl, double kl_coef);

// Count, sum and sum of squares of token values; add() on each rank, then sum the three over the
// ranks, then whiten with the global moments.
struct TokenMoments {
  double count = 0, sum = 0, sum_sq = 0;
  void add(double x) {
    count += 1;
    sum += x;
    sum_sq += x * x;
  }
  double mean() const { return count > 0 ? sum / count : 0.0; }
  // Unbiased (divide by count - 1); 0 for fewer than two values. One pass over the moments, in
  // fp64: accurate while |mean| is not many orders above the spread (returns of order 1 are fine).
  double variance() const;
};

// (x - mean) / sqrt(variance + 1e-8): verl's masked_whiten over the batch's completion tokens.
double whiten(double x, const TokenMoments& m);

}  // namespace shardrl
