// Choices of the RL objective that the Config names and the RL loop acts on: how advantages are
// estimated, how token losses are weighted, where the old log-probabilities of the importance
// ratio come from, how the KL to the reference is estimated, and what becomes of completions cut
// off at rollout.max_new_tokens.
#pragma once

namespace shardrl {

// grpo: (r - group mean) / group std; dr_grpo: r - group mean (Dr. GRPO); rloo: r - mean of the
// group's other samples; reinforce_plus_plus: per-token returns whitened over the global batch.
enum class AdvantageEstimator { grpo, dr_grpo, rloo, reinforce_plus_plus };
// token: every completion token of a minibatch weighs the same; sequence: every completion does;
// constant: every token weighs 1 / (completions x rl.loss_tokens), a constant (Dr. GRPO).
enum class LossAggregation { token, sequence, constant };
// recompute: a forward pass of the policy before the first update; rollout: the sampler's own.
enum class OldLogp { recompute, rollout };
// The KL estimators of rl/grpo.hpp's kl_estimate.
enum class KlEstimator { k1, k2, k3, low_var_kl };
// none: truncated completions train as any other; filter: they get no loss; soft: DAPO's linear
// length penalty over the last rl.overlong_buffer tokens before rollout.max_new_tokens.
enum class Overlong { none, filter, soft };

}  // namespace shardrl
