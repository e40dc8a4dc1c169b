// A completion's reward and whether it counts as a pass: what pass_rate and the evaluation's
// pass@1 and pass@k count. Built-in rewards pass a completion that scores exactly 1, their full
// score; a reward command may say so itself (rl/reward_command.hpp), e.g. a right answer whose
// reward a length penalty took below 1.
#pragma once

namespace shardrl {

struct Scored {
  double reward = 0;
  bool pass = false;
  // The built-in rule: a pass is a reward of exactly 1.
  static Scored of(double reward) { return {reward, reward == 1.0}; }
  bool operator==(const Scored& o) const { return reward == o.reward && pass == o.pass; }
};

}  // namespace shardrl
