// The GRPO train objective of one micro-batch: the clipped surrogate (and the KL penalty) of
// src/rl/grpo.hpp over the micro-batch's tokens, with per-token old log-probabilities,
// reference log-probabilities, advantages and weights that the caller uploaded. The weights carry
// the normalisation (1 / completion tokens of the global minibatch, or 1 / (completions x
// length)), so summing over micro-batches and ranks gives the minibatch's mean.
#pragma once

#include "model/token_objective.hpp"
#include "rl/grpo.hpp"

namespace shardrl {

class GrpoObjective final : public TokenObjective {
 public:
  GrpoObjective(const float* old_logp, const float* ref_logp, const float* advantage, const float* weight,
                const GrpoLossOptions& options, float* stats)
      : old_logp_(old_logp), ref_logp_(ref_logp), advantage_(advantage), weight_(weight), options_(options),
        stats_(stats) {}
  void apply(const ExecSpace& space, const float* logp, float* dlogp, int n) const override {
    grpo_token_loss(space, logp, old_logp_, ref_logp_, advantage_, weight_, options_, n, dlogp, stats_);
  }
  std::string identity() const override {
    return fmt::format("grpo {} {} {} {} {} {} {} {}", static_cast<const void*>(old_logp_),
                       static_cast<const void*>(ref_logp_), static_cast<const void*>(advantage_),
                       static_cast<const void*>(weight_), options_.clip_low, options_.clip_high, options_.kl_coef,
                       static_cast<const void*>(stats_));
  }

 private:
  const float *old_logp_, *ref_logp_, *advantage_, *weight_;
  GrpoLossOptions options_;
  float* stats_;
};

}  // namespace shardrl
