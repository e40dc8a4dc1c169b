// The text rewards: exact match, the PCRE2 regex reward (last match, UTF-8, bad patterns named
// with PCRE2's message and offset), the math verifier with and without a format bonus, option
// validation, and concurrent scoring from several threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "rl/text_reward.hpp"

namespace shardrl {
namespace {

TextReward make_reward(TextRewardKind kind, double format_reward = 0, std::string pattern = "") {
  TextRewardOptions options;
  options.kind = kind;
  options.format_reward = format_reward;
  options.pattern = std::move(pattern);
  return TextReward(options);
}

// The InputError's message, or "" when constructing does not throw one.
std::string construction_error(TextRewardKind kind, double format_reward, const std::string& pattern) {
  try {
    make_reward(kind, format_reward, pattern);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TextRewardKind, Names) {
  EXPECT_EQ(text_reward_kind_from_name("math"), TextRewardKind::math);
  EXPECT_EQ(text_reward_kind_from_name("exact"), TextRewardKind::exact);
  EXPECT_EQ(text_reward_kind_from_name("regex"), TextRewardKind::regex);
  for (TextRewardKind kind : {TextRewardKind::math, TextRewardKind::exact, TextRewardKind::regex}) {
    EXPECT_EQ(text_reward_kind_from_name(text_reward_kind_name(kind)), kind);
  }
  try {
    text_reward_kind_from_name("Math");
    FAIL() << "no InputError for an unknown reward";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'Math'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("math, exact, regex"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------- exact

TEST(TextReward, ExactTrimsBothSides) {
  const TextReward reward = make_reward(TextRewardKind::exact);
  EXPECT_EQ(reward.score(" 42\n", "42"), 1.0);
  EXPECT_EQ(reward.score("42", "\t42  \r\n"), 1.0);
  EXPECT_EQ(reward.score("42 ", "43"), 0.0);
  EXPECT_EQ(reward.score("4 2", "42"), 0.0);   // inner whitespace counts
  EXPECT_EQ(reward.score("Paris", "paris"), 0.0);
  EXPECT_EQ(reward.score("\\boxed{42}", "42"), 0.0);   // no extraction
  EXPECT_EQ(reward.score("  ", ""), 1.0);
}

// ---------------------------------------------------------------------------------- regex

TEST(TextReward, RegexComparesTheLastMatchsFirstGroup) {
  const TextReward reward = make_reward(TextRewardKind::regex, 0.25, "ANSWER:\\s*(\\w+)");
  EXPECT_EQ(reward.score("ANSWER: a ... no, ANSWER: b", "b"), 1.0);
  EXPECT_EQ(reward.score("ANSWER: a ... no, ANSWER: b", "a"), 0.25);   // matched, wrong: the format bonus
  EXPECT_EQ(reward.score("ANSWER:   b   ", "  b "), 1.0);
  EXPECT_EQ(reward.score("answer: b", "b"), 0.0);   // case-sensitive as written: no match
  EXPECT_EQ(reward.score("", "b"), 0.0);
}

TEST(TextReward, RegexLastOfManyMatches) {
  const TextReward reward = make_reward(TextRewardKind::regex, 0, "(\\d+)");
  EXPECT_EQ(reward.score("1 22 333", "333"), 1.0);
  EXPECT_EQ(reward.score("1 22 333", "22"), 0.0);
}

TEST(TextReward, RegexUtf8) {
  // 答案：(.+)
  const TextReward reward = make_reward(TextRewardKind::regex, 0, "\xE7\xAD\x94\xE6\xA1\x88\xEF\xBC\x9A(.+)");
  EXPECT_EQ(reward.score("\xE7\xAD\x94\xE6\xA1\x88\xEF\xBC\x9A\xE5\x9B\x9B\xE5\x8D\x81\xE4\xBA\x8C",
                         "\xE5\x9B\x9B\xE5\x8D\x81\xE4\xBA\x8C"), 1.0);   // 四十二
  // `.` is one character, not one byte: the group of "答案：é" is the two bytes of é.
  const TextReward one_char = make_reward(TextRewardKind::regex, 0, "x(.)$");
  EXPECT_EQ(one_char.score("x\xC3\xA9", "\xC3\xA9"), 1.0);
}

TEST(TextReward, RegexToleratesInvalidUtf8InTheCompletion) {
  // A completion cut inside a multi-byte character still gets its match.
  const TextReward reward = make_reward(TextRewardKind::regex, 0, "ANSWER: (\\d+)");
  EXPECT_EQ(reward.score("\xFF\xFE garbage \xE5\x9B ANSWER: 5 \xC3", "5"), 1.0);
}

TEST(TextReward, RegexEmptyMatchesTerminate) {
  // A pattern that matches the empty string steps over whole characters and ends.
  const TextReward reward = make_reward(TextRewardKind::regex, 0, "(x*)");
  EXPECT_EQ(reward.score("\xC3\xA4\xC3\xB6\xC3\xBC", ""), 1.0);   // the last match is the empty one at the end
  EXPECT_EQ(reward.score("\xC3\xA4xx", ""), 1.0);
}

TEST(TextReward, RegexUnsetGroupIsEmpty) {
  const TextReward reward = make_reward(TextRewardKind::regex, 0.5, "A(B)?");
  EXPECT_EQ(reward.score("AB A", "B"), 0.5);   // the last match "A" left the group unset
  EXPECT_EQ(reward.score("A AB", "B"), 1.0);
}

TEST(TextReward, RegexBadPatternNamesPatternMessageAndOffset) {
  const std::string message = construction_error(TextRewardKind::regex, 0, "ANSWER: (\\d+");
  EXPECT_NE(message.find("ANSWER: (\\d+"), std::string::npos) << message;
  EXPECT_NE(message.find("missing closing parenthesis"), std::string::npos) << message;
  EXPECT_NE(message.find("offset 12"), std::string::npos) << message;

  const std::string quantifier = construction_error(TextRewardKind::regex, 0, "a(b)**");
  EXPECT_NE(quantifier.find("offset 5"), std::string::npos) << quantifier;
}

TEST(TextReward, RegexNeedsACaptureGroup) {
  const std::string message = construction_error(TextRewardKind::regex, 0, "ANSWER: \\d+");
  EXPECT_NE(message.find("no capture group"), std::string::npos) << message;
  EXPECT_NE(construction_error(TextRewardKind::regex, 0, ""), "");
}

TEST(TextReward, PatternOnlyWithRegex) {
  EXPECT_NE(construction_error(TextRewardKind::math, 0, "(\\d+)").find("only \"regex\""), std::string::npos);
  EXPECT_NE(construction_error(TextRewardKind::exact, 0, "(\\d+)"), "");
}

// ---------------------------------------------------------------------------------- math

TEST(TextReward, MathWithoutFormatReward) {
  const TextReward reward = make_reward(TextRewardKind::math);
  EXPECT_EQ(reward.score("so \\boxed{\\frac{3}{4}}", "0.75"), 1.0);
  EXPECT_EQ(reward.score("so \\boxed{0.7}", "0.75"), 0.0);
  EXPECT_EQ(reward.score("3 + 4 = 7", "7"), 1.0);    // the last number, correct
  EXPECT_EQ(reward.score("no idea", "7"), 0.0);
}

TEST(TextReward, MathWithFormatReward) {
  const TextReward reward = make_reward(TextRewardKind::math, 0.1);
  EXPECT_EQ(reward.score("\\boxed{42}", "42"), 1.0);         // correct: exactly 1, no bonus on top
  EXPECT_EQ(reward.score("\\boxed{41}", "42"), 0.1);         // well-formed, wrong
  EXPECT_EQ(reward.score("#### 41", "42"), 0.1);
  EXPECT_EQ(reward.score("The answer is 41.", "42"), 0.1);
  EXPECT_EQ(reward.score("I get 41", "42"), 0.0);            // only a last number: no bonus
  EXPECT_EQ(reward.score("I get 42", "42"), 1.0);            // ...but correct is correct
  EXPECT_EQ(reward.score("\\boxed{41", "42"), 0.0);          // truncated box: not well-formed
  EXPECT_EQ(reward.score("nothing", "42"), 0.0);
  EXPECT_EQ(reward.score("\\boxed{42}", ""), 0.1);           // an empty reference is never matched
}

TEST(TextReward, MathGsm8kReference) {
  const TextReward reward = make_reward(TextRewardKind::math, 0.2);
  const std::string reference = "She sells 16 - 3 - 4 = 9 eggs for 9 * 2 = $18.\n#### 18";
  EXPECT_EQ(reward.score("... so she makes $18 every day.\n#### 18", reference), 1.0);
  EXPECT_EQ(reward.score("#### 9", reference), 0.2);
}

TEST(TextReward, FormatRewardValidated) {
  for (double bad : {-0.1, 1.0, 1.5, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    EXPECT_NE(construction_error(TextRewardKind::math, bad, "").find("rl.format_reward"), std::string::npos) << bad;
  }
  EXPECT_EQ(construction_error(TextRewardKind::math, 0.99, ""), "");
  EXPECT_NE(construction_error(TextRewardKind::exact, 0.1, "").find("exact"), std::string::npos);
}

// ---------------------------------------------------------------------------------- threads

TEST(TextReward, ConcurrentScoringAndCopies) {
  const TextReward regex = make_reward(TextRewardKind::regex, 0.5, "ANSWER: (\\d+)");
  const TextReward copy = regex;   // shares the compiled pattern
  const TextReward math = make_reward(TextRewardKind::math, 0.5);
  std::vector<double> sums(8, 0.0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < sums.size(); ++t) {
    threads.emplace_back([&, t] {
      const TextReward& mine = (t % 2 == 0) ? regex : copy;
      for (int i = 0; i < 2000; ++i) {
        const std::string n = std::to_string(i % 10);
        sums[t] += mine.score("ANSWER: 1 then ANSWER: " + n, "3");
        sums[t] += math.score("\\boxed{" + n + "}", "3");
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // Per 10 iterations: one correct (1.0) and nine well-formed wrong (0.5), for each reward.
  for (double sum : sums) EXPECT_DOUBLE_EQ(sum, 2 * 200 * (1.0 + 9 * 0.5));
}

}  // namespace
}  // namespace shardrl
