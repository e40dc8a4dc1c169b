// Final-answer extraction (the rules are listed in math_answer.hpp): which answer a completion
// commits to. Every pass over the text is linear, so a degenerate completion (100 KB of
// `\boxed{\boxed{...`) costs little.
#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "rl/math_answer.hpp"
#include "rl/math_text.hpp"

namespace shardrl {

using namespace math_text;

namespace {

// ---- extraction -------------------------------------------------------------------------------

// After ", ": another number or a joining word ("2, 3", "5, or maybe 6", "4 apples, 5 pears")
// continues the answer as a list or a hedge, graded whole; a reason ("5, since ...") does not. Cut
// at the comma, "The answer is 2, 3" was graded as 2 and "5, or maybe 6" as 5.
bool continues_the_answer(std::string_view rest) {
  while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
  if (!rest.empty() && (rest.front() == '-' || rest.front() == '+' || rest.front() == '$')) rest.remove_prefix(1);
  if (!rest.empty() && is_digit(rest.front())) return true;
  std::size_t end = 0;
  while (end < rest.size() && is_letter(rest[end])) ++end;
  const std::string word = lower_case(rest.substr(0, end));
  return is_hedge_word(word) || word == "and";
}

// Cuts an answer at the end of its sentence: the first `.` `,` `;` followed by whitespace (or the
// end), outside brackets and `$...$`, so "42." and "5, since ..." give the number while "3.14",
// "1,234" and "(1, 2)" stay whole. Then trims spaces and markdown `*`.
//
// A single `$` delimits math by pandoc's rule (tex_math_dollars): the opening one has a
// non-space character right after it, the closing one a non-space character right before it and
// no digit right after it; `\$` is a dollar sign. A `$` that closes nothing is text: a price
// ("$18, which she makes every day" gives 18, where toggling on every `$` kept the rest of the
// line). `$$` toggles display math.
std::string_view cut_at_sentence_end(std::string_view s) {
  const auto escaped = [&](std::size_t i) { return i > 0 && s[i - 1] == '\\'; };
  const auto closes_math = [&](std::size_t j) {
    return s[j] == '$' && j > 0 && !escaped(j) && !is_space(s[j - 1]) && s[j - 1] != '$' &&
           (j + 1 >= s.size() || (!is_digit(s[j + 1]) && s[j + 1] != '$'));
  };
  // next_close[i]: the first closing `$` at or after i (npos if none), in one backward pass.
  std::vector<std::size_t> next_close(s.size() + 1, npos);
  for (std::size_t j = s.size(); j-- > 0;) next_close[j] = closes_math(j) ? j : next_close[j + 1];
  int depth = 0;
  bool in_math = false, in_display = false;
  std::size_t math_end = npos;   // the `$` that closes the inline math in progress
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '$' && !escaped(i)) {
      if (i + 1 < s.size() && s[i + 1] == '$') {   // `$$`
        in_display = !in_display;
        ++i;
        continue;
      }
      if (in_math && i == math_end) {
        in_math = false;
      } else if (!in_math && !in_display && i + 1 < s.size() && !is_space(s[i + 1]) &&
                 next_close[i + 1] != npos) {
        in_math = true;
        math_end = next_close[i + 1];
      }
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    const bool at_break = i + 1 == s.size() || is_space(s[i + 1]);
    if (depth == 0 && !in_math && !in_display && at_break && c == ',' && continues_the_answer(s.substr(i + 1)))
      continue;
    if (depth == 0 && !in_math && !in_display && at_break && (c == '.' || c == ',' || c == ';')) {
      s = s.substr(0, i);
      break;
    }
  }
  while (!s.empty() && (is_space(s.front()) || s.front() == '*')) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '*')) s.remove_suffix(1);
  return s;
}

// The line from `from` on, at most kMaxAnswerBytes of it: a phrase repeated along one long line
// (a degenerate completion) must not make each occurrence scan to the end of the text.
std::string_view rest_of_line(std::string_view text, std::size_t from) {
  const std::string_view window = text.substr(from, kMaxAnswerBytes);
  return window.substr(0, window.find('\n'));
}

// The last complete box's content; `cut_open` says whether a box opened after it never closed (a
// completion cut inside it at max_new_tokens).
std::optional<std::string> last_boxed(std::string_view text, bool& cut_open) {
  cut_open = false;
  const std::vector<std::size_t> close = match_braces(text);
  // A view, copied once at the end: nested boxes would otherwise copy their contents again and
  // again.
  std::optional<std::string_view> found;
  for (std::size_t at = text.find('\\'); at != npos; at = text.find('\\', at + 1)) {
    const std::string_view name = command_name(text, at + 1);
    if (name != "boxed" && name != "fbox") continue;
    const std::size_t name_end = at + 1 + name.size();
    std::size_t k = name_end;
    while (k < text.size() && is_space(text[k])) ++k;
    std::string_view content;
    if (k < text.size() && text[k] == '{') {
      if (close[k] == npos) {   // truncated
        cut_open = true;
        continue;
      }
      content = text.substr(k + 1, close[k] - k - 1);
    } else if (k > name_end) {          // `\boxed 5`
      std::size_t end = k;
      while (end < text.size() && !is_space(text[end]) && text[end] != '$') ++end;
      content = text.substr(k, end - k);
    } else {
      continue;
    }
    content = trim(content);
    if (!content.empty()) found = content;
    cut_open = false;
  }
  return found ? std::optional<std::string>(*found) : std::nullopt;
}

// No letter outside a command name: a number or a formula, not a markdown heading.
bool looks_like_bare_answer(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      i += command_name(s, i + 1).size();
    } else if (is_letter(s[i])) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> last_hashes(std::string_view text) {
  for (std::size_t at = text.rfind("####"); at != npos; at = at == 0 ? npos : text.rfind("####", at - 1)) {
    std::size_t run_begin = at;
    while (run_begin > 0 && text[run_begin - 1] == '#') --run_begin;
    // The whole line is checked, so a heading "#### 1. Totals" is not read as the answer 1.
    const std::string_view line = rest_of_line(text, at + 4);
    const std::string_view content = cut_at_sentence_end(line);
    if (!content.empty() && looks_like_bare_answer(line)) return std::string(content);
    if (run_begin == 0) break;
    at = run_begin;   // the loop searches before the start of this run of '#'
  }
  return std::nullopt;
}

// "the answer is correct", "the answer is indeed correct": a judgment of an answer given before,
// not an answer. Words only (no digit), a verdict among them and nothing but verdicts and the
// words that qualify them ("the answer is right angle 90" is not one).
bool is_a_verdict(std::string_view content) {
  static const std::array<std::string_view, 10> verdicts = {"correct", "incorrect", "right",      "wrong", "verified",
                                                            "confirmed", "consistent", "reasonable", "valid",  "sound"};
  static const std::array<std::string_view, 20> qualifiers = {
      "indeed", "also", "definitely", "clearly", "certainly", "surely", "still", "now", "then", "thus",
      "therefore", "so", "not", "actually", "fully", "again", "to", "be", "absolutely", "very"};
  bool judged = false;
  std::size_t i = 0;
  while (i < content.size()) {
    if (is_digit(content[i])) return false;
    if (!is_letter(content[i])) {
      ++i;
      continue;
    }
    std::string word;
    for (; i < content.size() && is_letter(content[i]); ++i) word += to_lower(content[i]);
    const auto in = [&](const auto& list) { return std::find(list.begin(), list.end(), word) != list.end(); };
    if (in(verdicts)) judged = true;
    else if (!in(qualifiers)) return false;
  }
  return judged;
}

std::optional<std::string> last_answer_phrase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), to_lower);
  const std::string_view low(lower);
  const auto skip = [&](std::size_t i, std::string_view chars) {
    while (i < low.size() && chars.find(low[i]) != npos) ++i;
    return i;
  };
  std::optional<std::string> verdict;   // the last "the answer is correct", if nothing else
  for (std::size_t at = low.rfind("answer"); at != npos; at = at == 0 ? npos : low.rfind("answer", at - 1)) {
    if (at > 0 && is_letter(low[at - 1])) continue;
    std::size_t i = skip(at + 6, " \t*");
    if (i < low.size() && low[i] == ':') {
      ++i;
    } else if (low.substr(i, 2) == "is" && (i + 2 == low.size() || !is_letter(low[i + 2]))) {
      i = skip(i + 2, " \t*");
      if (i < low.size() && low[i] == ':') ++i;
    } else {
      continue;
    }
    i = skip(i, " \t*");
    std::string_view line = trim(rest_of_line(text, i));
    if (line.empty()) {   // "The answer is:\n\n42"
      const std::size_t next = text.find_first_not_of(" \t\r\n\v\f*", i);
      if (next != npos) line = rest_of_line(text, next);
    }
    const std::string_view content = cut_at_sentence_end(line);
    if (content.empty()) continue;
    if (!is_a_verdict(content)) return std::string(content);
    if (!verdict) verdict = std::string(content);   // the answer itself when no phrase comes before
  }
  return verdict;
}

std::optional<std::string> last_number(std::string_view text) {
  static constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";
  std::optional<std::string> found;
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (!is_digit(text[i])) {
      ++i;
      continue;
    }
    const std::size_t begin = i;
    while (i < n && is_digit(text[i])) ++i;
    // Thousands groups: exactly three digits after each comma.
    while (i + 3 < n && text[i] == ',' && is_digit(text[i + 1]) && is_digit(text[i + 2]) &&
           is_digit(text[i + 3]) && (i + 4 == n || !is_digit(text[i + 4]))) {
      i += 4;
    }
    if (i + 1 < n && text[i] == '.' && is_digit(text[i + 1])) {
      ++i;
      while (i < n && is_digit(text[i])) ++i;
    }
    if (i + 1 < n && (text[i] == 'e' || text[i] == 'E')) {   // 3.0e2, 1E-3
      const std::size_t digits = i + 1 + ((text[i + 1] == '+' || text[i + 1] == '-') ? 1 : 0);
      if (digits < n && is_digit(text[digits])) {
        i = digits;
        while (i < n && is_digit(text[i])) ++i;
      }
    }
    if (i + 1 < n && text[i] == '/' && is_digit(text[i + 1])) {
      ++i;
      while (i < n && is_digit(text[i])) ++i;
    }
    // A minus is a sign unless it follows an operand ("10-5" is a difference).
    const auto is_sign_at = [&](std::size_t sign_begin) {
      return sign_begin == 0 || !(is_alnum(text[sign_begin - 1]) || text[sign_begin - 1] == ')');
    };
    const std::size_t minus_begin = begin >= kUnicodeMinus.size() ? begin - kUnicodeMinus.size() : npos;
    const bool ascii_sign = begin >= 1 && text[begin - 1] == '-' && is_sign_at(begin - 1);
    const bool unicode_sign = minus_begin != npos && text.substr(minus_begin, kUnicodeMinus.size()) == kUnicodeMinus &&
                              is_sign_at(minus_begin);
    std::string number(text.substr(begin, i - begin));
    if (ascii_sign || unicode_sign) number.insert(0, "-");
    found = std::move(number);
  }
  return found;
}

// The word before the completion's last number joins it to another ("3 or 5", "5 or maybe 6").
bool hedged_last_number(std::string_view text) {
  std::size_t i = text.size();
  while (i > 0 && !is_digit(text[i - 1])) --i;                  // the last number's last digit
  while (i > 0 && (is_digit(text[i - 1]) || text[i - 1] == '.' || text[i - 1] == ',' || text[i - 1] == '/')) --i;
  if (i > 0 && text[i - 1] == '-') --i;
  while (i > 0 && (is_space(text[i - 1]) || text[i - 1] == '$')) --i;
  std::size_t begin = i;
  while (begin > 0 && is_letter(text[begin - 1])) --begin;
  return is_hedge_word(lower_case(text.substr(begin, i - begin)));
}

}  // namespace

bool is_well_formed(AnswerMarker marker) { return marker != AnswerMarker::last_number; }

std::optional<FinalAnswer> find_final_answer(std::string_view completion) {
  // A reasoning model's answer follows its reasoning: what the <think> block holds is scratch
  // work (a \boxed{} tried there must not outrank the answer given after it), and a completion
  // whose reasoning never closed (cut at max_new_tokens) gave no answer.
  if (const std::size_t end = completion.rfind("</think>"); end != npos)
    completion.remove_prefix(end + std::string_view("</think>").size());
  if (completion.find("<think>") != npos) return std::nullopt;   // reasoning (again) never closed
  // A box opened after the last one closed (generation cut at max_new_tokens inside it) gave no
  // answer: graded by its last number (or the box before), "\boxed{5" scored 5 whatever was to
  // follow.
  bool cut_open = false;
  std::optional<std::string> boxed = last_boxed(completion, cut_open);
  if (cut_open) return std::nullopt;
  if (boxed) return FinalAnswer{std::move(*boxed), AnswerMarker::boxed};
  if (auto hashes = last_hashes(completion)) return FinalAnswer{std::move(*hashes), AnswerMarker::hashes};
  if (auto phrase = last_answer_phrase(completion)) return FinalAnswer{std::move(*phrase), AnswerMarker::answer_phrase};
  // The last number of a hedge ("it could be 3 or 5") is no answer either.
  if (auto number = last_number(completion); number && !hedged_last_number(completion))
    return FinalAnswer{std::move(*number), AnswerMarker::last_number};
  return std::nullopt;
}

std::optional<std::string> extract_final_answer(std::string_view completion) {
  std::optional<FinalAnswer> answer = find_final_answer(completion);
  if (!answer) return std::nullopt;
  return std::move(answer->text);
}

std::string_view reference_final_answer(std::string_view reference) {
  const std::size_t at = reference.rfind("####");
  return at == npos ? reference : trim(reference.substr(at + 4));
}

}  // namespace shardrl
