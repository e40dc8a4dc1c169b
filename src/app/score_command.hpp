// `shardrl score`: the reward a completion gets against an answer, for users to check their data
// and their choice of rl.reward before a run: prints the reward, and for "math" the final answer
// read from the completion.
//   shardrl score --reward math --answer "3/4" --completion "... \boxed{0.75}"
#pragma once

#include <string>

namespace shardrl {

struct ScoreArgs {
  std::string reward = "math";   // math | exact | regex (rl.reward)
  std::string answer, completion;
  std::string pattern;           // regex: rl.reward_pattern
  double format_reward = 0;      // rl.format_reward
};

int run_score(const ScoreArgs& args);

}  // namespace shardrl
