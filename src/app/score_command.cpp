#include "app/score_command.hpp"

#include <fmt/format.h>

#include <iostream>

#include "app/printable_line.hpp"
#include "core/error.hpp"
#include "rl/math_answer.hpp"
#include "rl/text_reward.hpp"

namespace shardrl {
namespace {

// The answer as read: as it is where it needs no escape but its backslashes (LaTeX's \frac reads
// as written, not \\frac), else escaped whole, so that each escape is unambiguous.
std::string shown_answer(const std::string& answer) {
  std::string doubled;
  for (char c : answer) doubled += c == '\\' ? std::string("\\\\") : std::string(1, c);
  const std::string escaped = printable_line(answer);
  return escaped == doubled ? answer : escaped;
}

}  // namespace

int run_score(const ScoreArgs& args) {
  try {
    TextRewardOptions options;
    options.kind = text_reward_kind_from_name(args.reward);
    options.format_reward = args.format_reward;
    options.pattern = args.pattern;
    const TextReward reward(options);
    if (options.kind == TextRewardKind::math) {
      const auto found = extract_final_answer(args.completion);
      std::cout << "final answer: " << (found ? shown_answer(*found) : std::string("(none)")) << "\n";
    }
    std::cout << fmt::format("reward: {}", reward.score(args.completion, args.answer)) << "\n";
    return 0;
  } catch (const InputError& e) {
    // The reward's checks are the job config's and name its keys; here the user typed flags.
    std::string message = e.what();
    for (const auto& [key, flag] : {std::pair<std::string, std::string>{"rl.format_reward = ", "--format-reward "},
                                    {"rl.reward = \"regex\"", "--reward regex"},
                                    {"rl.reward = \"exact\"", "--reward exact"},
                                    {"rl.reward = \"math\"", "--reward math"},
                                    {"rl.format_reward", "--format-reward"},
                                    {"rl.reward_pattern", "--pattern"}})
      for (std::size_t at = message.find(key); at != std::string::npos; at = message.find(key, at + flag.size()))
        message.replace(at, key.size(), flag);
    print_error(message);
    return kExitUsage;
  }
}

}  // namespace shardrl
