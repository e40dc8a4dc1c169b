// The GRPO train objective of one micro-batch: the token loss of src/rl/grpo.hpp over the
// micro-batch's tokens, with per-token old log-probabilities, reference log-probabilities,
// advantages, weights and importance weights that the caller uploaded, scored under the
// rollout's temperature. The weights carry the normalisation (rl.loss_aggregation), so summing
// over micro-batches and ranks gives the minibatch's loss.
#pragma once

#include "model/token_objective.hpp"
#include "rl/grpo.hpp"

namespace shardrl {

struct GrpoInputs {
  const float* old_logp = nullptr;    // (n)
  const float* ref_logp = nullptr;    // (n), or nullptr: no KL term
  const float* advantage = nullptr;   // (n)
  const float* weight = nullptr;      // (n)
  const float* is_weight = nullptr;   // (n), or nullptr: no importance correction
};

class GrpoObjective final : public TokenObjective {
 public:
  GrpoObjective(const GrpoInputs& in, const GrpoLossOptions& options, float temperature, float* stats)
      : in_(in), options_(options), temperature_(temperature), stats_(stats) {}
  TokenDistribution distribution() const override {
    return TokenDistribution{temperature_, options_.entropy_coef != 0.0f};
  }
  void apply(const ExecSpace& space, const float* logp, const float* entropy, float* dlogp, float* dentropy,
             int n) const override {
    grpo_token_loss(space, logp, in_.old_logp, in_.ref_logp, in_.advantage, in_.weight, in_.is_weight, entropy,
                    options_, n, dlogp, dentropy, stats_);
  }
  std::string identity() const override {
    return fmt::format("grpo {} {} {} {} {} {} {} {} {} {} {} {}", static_cast<const void*>(in_.old_logp),
                       static_cast<const void*>(in_.ref_logp), static_cast<const void*>(in_.advantage),
                       static_cast<const void*>(in_.weight), static_cast<const void*>(in_.is_weight),
                       options_.clip_low, options_.clip_high, options_.kl_coef, static_cast<int>(options_.kl_estimator),
                       options_.entropy_coef, temperature_, static_cast<const void*>(stats_));
  }

 private:
  GrpoInputs in_;
  GrpoLossOptions options_;
  float temperature_;
  float* stats_;
};

}  // namespace shardrl
