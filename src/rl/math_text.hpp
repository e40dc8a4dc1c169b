// The text helpers of math-answer normalisation (rl/math_answer.cpp) and its exact numbers
// (rl/exact_number.cpp): ASCII classes, trimming, and LaTeX's braces and command names, each
// linear in the text. Private to src/rl.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/string_affix.hpp"

namespace shardrl::math_text {

constexpr std::size_t npos = std::string_view::npos;
// A final answer is short: longer ones are compared as trimmed text, and an answer's line is
// read this far, which bounds the cost of whatever a degenerate completion wrote.
constexpr std::size_t kMaxAnswerBytes = 4096;

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool is_alnum(char c) { return is_digit(c) || is_letter(c); }
inline char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
inline std::string lower_case(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}
// A word (lower case) that joins an answer to another, making a hedge: "3 or 5", "5, maybe 6".
inline bool is_hedge_word(std::string_view word) {
  for (const char* joint : {"or", "nor", "maybe", "perhaps", "either", "vs", "versus"})
    if (word == joint) return true;
  return false;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

inline std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t at = 0;
  for (std::size_t hit = s.find(from); hit != npos; hit = s.find(from, at)) {
    out.append(s.substr(at, hit - at));
    out.append(to);
    at = hit + from.size();
  }
  out.append(s.substr(at));
  return out;
}

// For every `{` in `s`, the index of its matching `}` (npos when unclosed). A backslash escapes
// the next character, so `\{` and `\}` are literal braces, not grouping.
inline std::vector<std::size_t> match_braces(std::string_view s) {
  std::vector<std::size_t> close(s.size(), npos);
  std::vector<std::size_t> open;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '{') {
      open.push_back(i);
    } else if (s[i] == '}' && !open.empty()) {
      close[open.back()] = i;
      open.pop_back();
    }
  }
  return close;
}

// The `}` matching the `{` at `open`, or npos.
inline std::size_t closing_brace(std::string_view s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '{') {
      ++depth;
    } else if (s[i] == '}' && --depth == 0) {
      return i;
    }
  }
  return npos;
}

// The letters of a LaTeX command name starting at `begin` (just after the backslash).
inline std::string_view command_name(std::string_view s, std::size_t begin) {
  std::size_t end = begin;
  while (end < s.size() && is_letter(s[end])) ++end;
  return s.substr(begin, end - begin);
}

}  // namespace shardrl::math_text
