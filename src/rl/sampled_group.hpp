// One prompt's group of completions as the rollout drew and scored them, the wire form that moves
// groups between ranks, and dynamic sampling's choice of which drawn groups make the batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/generator.hpp"

namespace shardrl {

struct SampledGroup {
  std::int64_t prompt_index = 0;          // in the iteration's draw order: round * P + position
  std::vector<std::int32_t> prompt;       // the ids the model saw
  std::vector<Completion> completions;    // G, sample order
  std::vector<double> rewards;            // G: the task's reward plus any length penalty
  std::vector<double> scores;             // G: the task's reward alone
  // Whether the task's rewards differ: a group whose samples are all right (or all wrong, or
  // equally graded) teaches nothing about the task, so DAPO's dynamic sampling drops it. Its
  // length penalties (rl.overlong = "soft") may differ, and the group normalisation would blow
  // that pure length signal up to advantages of about +-1: DAPO filters on accuracy.
  bool informative() const;
};

// Groups with the batch slot each is going to, as bytes, and back. Entropies do not travel (they
// are reported where they were drawn).
std::string serialize_groups(const std::vector<std::pair<std::int64_t, SampledGroup>>& groups);
std::vector<std::pair<std::int64_t, SampledGroup>> deserialize_groups(const std::string& bytes);

// Dynamic sampling (DAPO): the draw-order indices of the `needed` groups of the batch, given
// every drawn group's informative flag in draw order: the first `needed` informative groups or,
// when there are fewer (the sampling rounds ran out), all of them and the earliest uninformative
// ones; returned in draw order. Needs informative.size() >= needed.
std::vector<std::int64_t> select_groups(const std::vector<char>& informative, std::int64_t needed);

}  // namespace shardrl
