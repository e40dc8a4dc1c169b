// Rewards that score a decoded completion against a text answer (rl.reward): a math verifier,
// exact match, or a regular expression. Built once from options; score() is a pure function of
// (completion, answer), thread-safe, and never throws (an unusable completion scores 0).
//
//   math   the completion's final answer (math_answer.hpp: \boxed, ####, "the answer is", last
//          number) equals the reference's (exact on numbers) -> 1.0; else, when the completion
//          marked a final answer (\boxed, ####, "answer is"/"answer:") -> format_reward; else 0.
//          A reference holding `####` (a whole GSM8K solution) is read after its last `####`.
//   exact  completion and answer equal once leading and trailing whitespace is trimmed -> 1.0,
//          else 0.
//   regex  `pattern` (PCRE2, UTF mode; invalid UTF-8 in a completion never matches) is matched
//          against the completion as often as it matches; the first capture group of the last
//          match, trimmed, equals the trimmed answer -> 1.0; matched but differs -> format_reward
//          (an unset group is ""); no match -> 0.
//
// A correct answer scores exactly 1.0, never 1.0 + format_reward: the bonus only lifts a wrong
// but well-formed answer above one with no answer at all, so format_reward is in [0, 1).
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace shardrl {

enum class TextRewardKind { math, exact, regex };

// "math", "exact", "regex" (rl.reward); anything else is an InputError listing these.
TextRewardKind text_reward_kind_from_name(std::string_view name);
std::string_view text_reward_kind_name(TextRewardKind kind);

struct TextRewardOptions {
  TextRewardKind kind = TextRewardKind::math;
  double format_reward = 0;   // rl.format_reward, in [0, 1); math and regex only
  std::string pattern;        // regex only: a PCRE2 pattern with at least one capture group
};

class TextReward {
 public:
  // InputError for a pattern that does not compile (naming the pattern, PCRE2's message and the
  // offset), a pattern without a capture group or given to another kind, a format_reward outside
  // [0, 1), or a format_reward with "exact" (which has no notion of a well-formed answer).
  explicit TextReward(const TextRewardOptions& options);

  double score(std::string_view completion, std::string_view answer) const;

  const TextRewardOptions& options() const { return options_; }

 private:
  struct CompiledPattern;   // the pcre2_code, shared read-only by copies and threads

  double score_regex(std::string_view completion, std::string_view answer) const;

  TextRewardOptions options_;
  std::shared_ptr<const CompiledPattern> pattern_;
};

}  // namespace shardrl
