// The text rewards of text_reward.hpp. The regex is compiled (and JIT-compiled where the platform
// allows) once; each score() call takes its own match data, so concurrent calls share nothing
// mutable.
#include "rl/text_reward.hpp"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "rl/math_answer.hpp"

namespace shardrl {
namespace {

std::string_view trim_whitespace(std::string_view s) {
  constexpr std::string_view kWhitespace = " \t\n\r\v\f";
  const std::size_t begin = s.find_first_not_of(kWhitespace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kWhitespace) - begin + 1);
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(code, buffer, sizeof buffer);
  if (length < 0) return fmt::format("PCRE2 error {}", code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(length));
}

// A pattern for an error message, as the user wrote it: unlike excerpt(), backslashes stay as
// they are (a regex is mostly backslashes); other bytes outside printable ASCII are escaped.
std::string quote_pattern(std::string_view pattern) {
  constexpr std::size_t kMaxBytes = 200;
  std::string out = "`";
  for (std::size_t i = 0; i < pattern.size() && i < kMaxBytes; ++i) {
    const auto c = static_cast<unsigned char>(pattern[i]);
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  if (pattern.size() > kMaxBytes) out += "...";
  return out + "`";
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

struct TextReward::CompiledPattern {
  pcre2_code* code = nullptr;
  bool jit = false;

  CompiledPattern() = default;
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;
  ~CompiledPattern() { pcre2_code_free(code); }
};

TextRewardKind text_reward_kind_from_name(std::string_view name) {
  if (name == "math") return TextRewardKind::math;
  if (name == "exact") return TextRewardKind::exact;
  if (name == "regex") return TextRewardKind::regex;
  throw InputError(fmt::format("unknown reward '{}' (rl.reward is one of: math, exact, regex)", excerpt(name)));
}

std::string_view text_reward_kind_name(TextRewardKind kind) {
  switch (kind) {
    case TextRewardKind::math: return "math";
    case TextRewardKind::exact: return "exact";
    case TextRewardKind::regex: return "regex";
  }
  return "?";
}

TextReward::TextReward(const TextRewardOptions& options) : options_(options) {
  const std::string_view kind = text_reward_kind_name(options.kind);
  if (!std::isfinite(options.format_reward) || options.format_reward < 0 || options.format_reward >= 1) {
    throw InputError(fmt::format("rl.format_reward = {} is outside [0, 1): a wrong answer must score below a "
                                 "correct one (1.0)", options.format_reward));
  }
  if (options.kind == TextRewardKind::exact && options.format_reward != 0) {
    throw InputError(fmt::format("rl.format_reward = {} has no effect with rl.reward = \"exact\" (only \"math\" "
                                 "and \"regex\" know a well-formed answer); set it to 0", options.format_reward));
  }
  if (options.kind != TextRewardKind::regex) {
    if (!options.pattern.empty()) {
      throw InputError(fmt::format("a reward pattern ({}) is given but rl.reward = \"{}\"; only \"regex\" uses one",
                                   quote_pattern(options.pattern), kind));
    }
    return;
  }
  if (options.pattern.empty()) throw InputError("rl.reward = \"regex\" needs a pattern with a capture group: rl.reward_pattern");

  auto compiled = std::make_shared<CompiledPattern>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_MATCH_INVALID_UTF: a completion cut inside a multi-byte character (byte-level
  // decoding) is still searched; matches simply never span the invalid bytes.
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(options.pattern.data()), options.pattern.size(),
                                 PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!compiled->code) {
    throw InputError(fmt::format("reward regex {} does not compile: {} at offset {}", quote_pattern(options.pattern),
                                 pcre2_message(error), offset));
  }
  std::uint32_t captures = 0;
  pcre2_pattern_info(compiled->code, PCRE2_INFO_CAPTURECOUNT, &captures);
  if (captures == 0) {
    throw InputError(fmt::format("reward regex {} has no capture group: the first group is what is compared with "
                                 "the answer", quote_pattern(options.pattern)));
  }
  // Without JIT the interpreter finds the same matches, only slower.
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  pattern_ = std::move(compiled);
}

double TextReward::score(std::string_view completion, std::string_view answer) const {
  switch (options_.kind) {
    case TextRewardKind::math: {
      const std::optional<FinalAnswer> given = find_final_answer(completion);
      if (!given) return 0.0;
      if (answers_equal(given->text, reference_final_answer(answer))) return 1.0;
      return is_well_formed(given->marker) ? options_.format_reward : 0.0;
    }
    case TextRewardKind::exact:
      return trim_whitespace(completion) == trim_whitespace(answer) ? 1.0 : 0.0;
    case TextRewardKind::regex:
      return score_regex(completion, answer);
  }
  return 0.0;
}

double TextReward::score_regex(std::string_view completion, std::string_view answer) const {
  const pcre2_code* code = pattern_->code;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(code, nullptr));
  if (!data) return 0.0;   // out of memory: score it as no match rather than throw from a worker
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(completion.data());
  std::optional<std::string_view> last_group;
  std::size_t start = 0;
  while (start <= completion.size()) {
    const int rc = pattern_->jit
                       ? pcre2_jit_match(code, subject, completion.size(), start, 0, data.get(), nullptr)
                       : pcre2_match(code, subject, completion.size(), start, 0, data.get(), nullptr);
    // No match, or a limit hit (match or depth limit on a pathological pattern): stop with the
    // matches found so far. A limit is said once per process: the completion scored as if it
    // had no (further) match, which may have cost a right answer its reward.
    if (rc < 0) {
      static std::atomic<bool> said{false};
      if (rc != PCRE2_ERROR_NOMATCH && !said.exchange(true)) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        spdlog::warn("rl.reward_pattern: PCRE2 gave up on a completion ({}): it is scored on the matches before, and "
                     "a pattern that backtracks less (no nested quantifiers) avoids it (said once)",
                     reinterpret_cast<const char*>(message));
      }
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const PCRE2_SIZE group_begin = ovector[2];
    const PCRE2_SIZE group_end = ovector[3];
    last_group = (rc >= 2 && group_begin != PCRE2_UNSET)
                     ? completion.substr(group_begin, group_end - group_begin)
                     : std::string_view();
    const std::size_t match_begin = ovector[0];
    const std::size_t match_end = ovector[1];
    if (match_end > match_begin) {
      start = match_end;
    } else {   // an empty match: go on after the next character (the whole of a UTF-8 sequence)
      start = match_begin + 1;
      while (start < completion.size() && (static_cast<unsigned char>(completion[start]) & 0xC0) == 0x80) ++start;
    }
  }
  if (!last_group) return 0.0;
  return trim_whitespace(*last_group) == trim_whitespace(answer) ? 1.0 : options_.format_reward;
}

}  // namespace shardrl
