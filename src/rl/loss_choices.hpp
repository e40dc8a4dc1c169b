// Choices of the GRPO objective that the Config names and the RL loop acts on: how token losses
// are weighted, and where the old log-probabilities of the importance ratio come from.
#pragma once

namespace shardrl {

// token: every completion token of a minibatch weighs the same; sequence: every completion does.
enum class LossAggregation { token, sequence };
// recompute: a forward pass of the policy before the first update; rollout: the sampler's own.
enum class OldLogp { recompute, rollout };

}  // namespace shardrl
