// Shared pieces of the tasks (see task_common.hpp), and the Task interface's default scoring of ids.
#include "rl/task_common.hpp"

#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {

// Generated tasks are text: nothing of theirs is scored on ids.
double Task::score_ids(const TaskExample&, const std::vector<std::int32_t>&) const {
  throw InputError(fmt::format("task '{}' scores decoded text, not token ids (its examples are not pre-tokenized)",
                               name()));
}

std::vector<Scored> Task::score_ids_batch(const std::vector<TaskExample>& examples,
                                          const std::vector<std::vector<std::int32_t>>& completions) const {
  std::vector<Scored> rewards;
  rewards.reserve(examples.size());
  for (std::size_t i = 0; i < examples.size(); ++i) rewards.push_back(Scored::of(score_ids(examples[i], completions[i])));
  return rewards;
}

TaskExample Task::eval_example(std::int64_t index) const {
  throw InputError(fmt::format("task '{}' has no eval split (example {} asked for)", name(), index));
}

}  // namespace shardrl

namespace shardrl::task_detail {

std::mt19937_64 example_engine(std::uint32_t salt, std::uint64_t seed, std::int64_t iteration,
                               std::int64_t index) {
  const auto it = static_cast<std::uint64_t>(iteration);
  const auto ix = static_cast<std::uint64_t>(index);
  std::seed_seq seq{salt,
                    static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(it), static_cast<std::uint32_t>(it >> 32),
                    static_cast<std::uint32_t>(ix), static_cast<std::uint32_t>(ix >> 32)};
  return std::mt19937_64(seq);
}

std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t n) {
  // Reject the top partial bucket so every residue is equally likely.
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % n + 1) % n;   // largest accepted value
  std::uint64_t r = engine();
  while (r > limit) r = engine();
  return r % n;
}

std::string strip_trailing_whitespace(const std::string& text) {
  std::size_t end = text.size();
  while (end > 0) {
    const char c = text[end - 1];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f') break;
    --end;
  }
  return text.substr(0, end);
}

}  // namespace shardrl::task_detail
