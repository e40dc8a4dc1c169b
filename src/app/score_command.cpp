#include "app/score_command.hpp"

#include <fmt/format.h>

#include <iostream>

#include "app/printable_line.hpp"
#include "core/error.hpp"
#include "rl/math_answer.hpp"
#include "rl/text_reward.hpp"

namespace shardrl {

int run_score(const ScoreArgs& args) {
  try {
    TextRewardOptions options;
    options.kind = text_reward_kind_from_name(args.reward);
    options.format_reward = args.format_reward;
    options.pattern = args.pattern;
    const TextReward reward(options);
    if (options.kind == TextRewardKind::math) {
      const auto found = extract_final_answer(args.completion);
      std::cout << "final answer: " << (found ? printable_line(*found) : std::string("(none)")) << "\n";
    }
    std::cout << fmt::format("reward: {}", reward.score(args.completion, args.answer)) << "\n";
    return 0;
  } catch (const InputError& e) {
    std::cerr << "shardrl: " << e.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace shardrl
