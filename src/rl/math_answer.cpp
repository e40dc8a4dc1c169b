// Final-answer normalisation and comparison (the rules are listed in math_answer.hpp; extraction
// is math_answer_extract.cpp). Every pass over the text is linear, so a degenerate answer costs
// little; numbers are exact (rl/exact_number.cpp).
#include "rl/math_answer.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

#include "rl/exact_number.hpp"
#include "rl/math_text.hpp"

namespace shardrl {

using namespace math_text;

namespace {

// Tuples inside tuples are normalised element-wise this deep, then compared as text.
constexpr int kMaxNestingDepth = 8;

// ---- normalisation passes ---------------------------------------------------------------------

std::string replace_unicode(std::string_view s) {
  std::string out = replace_all(s, "\xE2\x88\x92", "-");    // U+2212 minus sign
  out = replace_all(out, "\xC2\xB0", "");                   // U+00B0 degree sign
  out = replace_all(out, "\xC2\xA0", " ");                  // U+00A0 no-break space
  out = replace_all(out, "\xE2\x80\x89", " ");              // U+2009 thin space
  out = replace_all(out, "\xE2\x80\xAF", " ");              // U+202F narrow no-break space
  out = replace_all(out, "\xC3\x97", "\\times ");           // U+00D7 multiplication sign
  out = replace_all(out, "\xE2\x88\x9E", "\\infty ");       // U+221E infinity
  return out;
}

void strip_trailing_periods(std::string& s) {
  while (!s.empty() && (is_space(s.back()) || s.back() == '.')) s.pop_back();
}

// Surrounding math delimiters and \boxed{}, and trailing periods, until none is left.
void unwrap_delimiters(std::string& s) {
  for (;;) {
    s = std::string(trim(s));
    strip_trailing_periods(s);
    const std::string_view v(s);
    std::string_view inner;
    if (v.size() >= 4 && starts_with(v, "$$") && ends_with(v, "$$") && v.substr(2, v.size() - 4).find('$') == npos) {
      inner = v.substr(2, v.size() - 4);
    } else if (v.size() >= 2 && v.front() == '$' && v.back() == '$' && v.substr(1, v.size() - 2).find('$') == npos) {
      inner = v.substr(1, v.size() - 2);
    } else if (v.size() >= 4 && ((starts_with(v, "\\(") && ends_with(v, "\\)")) ||
                                 (starts_with(v, "\\[") && ends_with(v, "\\]")))) {
      inner = v.substr(2, v.size() - 4);
    } else if ((starts_with(v, "\\boxed{") || starts_with(v, "\\fbox{")) &&
               closing_brace(v, v.find('{')) == v.size() - 1) {
      const std::size_t open = v.find('{');
      inner = v.substr(open + 1, v.size() - open - 2);
    } else {
      return;
    }
    s = std::string(inner);
  }
}

bool is_text_command(std::string_view name) {
  static constexpr std::string_view kNames[] = {"text",   "textbf", "textit", "textrm", "texttt", "textsf",
                                                "mathrm", "mathbf", "mathit", "mbox",   "hbox",   "operatorname"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// One pass over the LaTeX commands: drops layout (\left, \right, spacing), unwraps text commands
// into spaces around their content, unifies \dfrac/\tfrac, and drops `\$`, `\%`, degree marks.
std::string rewrite_commands(std::string_view s) {
  const std::vector<std::size_t> close = match_braces(s);
  std::vector<bool> close_as_space(s.size(), false);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '}' && close_as_space[i]) {
      out += ' ';
      ++i;
      continue;
    }
    if (c == '^' && (starts_with(s.substr(i), "^\\circ") || starts_with(s.substr(i), "^{\\circ}"))) {
      i += s[i + 1] == '{' ? 8 : 6;
      continue;
    }
    if (c != '\\' || i + 1 == s.size()) {
      out += c;
      ++i;
      continue;
    }
    const char next = s[i + 1];
    if (!is_letter(next)) {
      switch (next) {
        case ',': case '!': case ';': case ':': case '%': case '$': break;
        case ' ': out += ' '; break;
        case '-': out += '-'; break;
        default: out += c; out += next; break;   // `\\`, `\{`, `\}`, ...
      }
      i += 2;
      continue;
    }
    const std::string_view name = command_name(s, i + 1);
    const std::size_t after = i + 1 + name.size();
    if (name == "left" || name == "right" || name == "displaystyle" || name == "degree") {
      // dropped
    } else if (name == "quad" || name == "qquad") {
      out += ' ';
    } else if (name == "dfrac" || name == "tfrac") {
      out += "\\frac";
    } else if (is_text_command(name)) {
      std::size_t k = after;
      while (k < s.size() && is_space(s[k])) ++k;
      if (k < s.size() && s[k] == '{' && close[k] != npos) {
        out += ' ';
        close_as_space[close[k]] = true;
        i = k + 1;
        continue;
      }
      out += '\\';
      out += name;
    } else {
      out += '\\';
      out += name;
    }
    i = after;
  }
  return out;
}

// A leading `x =`, `answer =`, `\theta =`, `x_1 =` when it is the only `=`.
void strip_leading_assignment(std::string& s) {
  if (std::count(s.begin(), s.end(), '=') != 1) return;
  std::size_t i = s.size() > 0 && s[0] == '\\' ? 1 : 0;
  const std::size_t name_begin = i;
  while (i < s.size() && is_letter(s[i])) ++i;
  if (i == name_begin) return;
  if (i < s.size() && s[i] == '_') {
    ++i;
    if (i < s.size() && s[i] == '{') {
      const std::size_t close = s.find('}', i);
      if (close == npos) return;
      i = close + 1;
    } else if (i < s.size() && is_alnum(s[i])) {
      ++i;
    } else {
      return;
    }
  }
  while (i < s.size() && is_space(s[i])) ++i;
  if (i >= s.size() || s[i] != '=') return;
  s = std::string(trim(std::string_view(s).substr(i + 1)));
}

// `\frac12` -> `\frac{1}{2}`, `\frac1{2}`, `\frac a b`, `\frac\pi2`; `\sqrt2` -> `\sqrt{2}`:
// every argument of \frac and \sqrt braced, so one form remains.
std::string brace_arguments(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '\\' || i + 1 == s.size() || !is_letter(s[i + 1])) {
      out += s[i];
      // An escaped character is copied whole so that `\\frac` stays two tokens.
      if (s[i] == '\\' && i + 1 < s.size()) out += s[++i];
      ++i;
      continue;
    }
    const std::string_view name = command_name(s, i + 1);
    out += '\\';
    out += name;
    i += 1 + name.size();
    const int arguments = name == "frac" ? 2 : name == "sqrt" ? 1 : 0;
    for (int a = 0; a < arguments; ++a) {
      std::size_t j = i;
      while (j < s.size() && is_space(s[j])) ++j;
      if (j >= s.size()) break;
      if (s[j] == '{') {
        const std::size_t close = closing_brace(s, j);
        if (close == npos) break;
        out += '{';
        out += brace_arguments(s.substr(j + 1, close - j - 1));
        out += '}';
        i = close + 1;
      } else if (is_alnum(s[j])) {
        out += '{';
        out += s[j];
        out += '}';
        i = j + 1;
      } else if (s[j] == '\\' && j + 1 < s.size() && is_letter(s[j + 1])) {
        const std::string_view inner = command_name(s, j + 1);
        out += "{\\";
        out += inner;
        out += '}';
        i = j + 1 + inner.size();
      } else {
        break;   // `\sqrt[3]{x}` and anything unusual: left as written
      }
    }
  }
  return out;
}

// `5 apples`, `5  cm` (from `5\text{ cm}`), `\frac{1}{2} cup` -> the number: a number followed by
// whitespace and then a letter loses everything from the whitespace on, unless what follows is
// an expression: an operator (`2 x + 1`, `3 x^2 - 5`; a hyphen only spaced, as units have their
// own: `ft-lb`, `light-years`) or a single letter raised to a power (`3 x^2`, where `5 cm^2` is a
// unit).
void drop_words_after_number(std::string& s) {
  // The end of a `\frac{..}{..}` at `at`, or npos.
  const auto past_frac = [&s](std::size_t at) {
    if (!starts_with(std::string_view(s).substr(at), "\\frac{")) return npos;
    const std::size_t close1 = closing_brace(s, at + 5);
    if (close1 == npos || close1 + 1 >= s.size() || s[close1 + 1] != '{') return npos;
    const std::size_t close2 = closing_brace(s, close1 + 1);
    return close2 == npos ? npos : close2 + 1;
  };
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  if (starts_with(std::string_view(s).substr(i), "\\frac{")) {
    i = past_frac(i);
    if (i == npos) return;
  } else {
    const std::size_t body = i;
    bool digits = false;
    while (i < s.size() && (is_digit(s[i]) || s[i] == '.' || s[i] == ',' || s[i] == '/')) digits |= is_digit(s[i++]);
    // "1, a" is a list, not the number 1 with a word after it.
    if (!digits || i == body || s[i - 1] == ',' || s[i - 1] == '/') return;
    // A mixed number, `3\frac{1}{2} cups`.
    if (const std::size_t end = past_frac(i); end != npos) i = end;
  }
  const std::size_t gap = i;
  while (i < s.size() && is_space(s[i])) ++i;
  if (i == gap || i >= s.size() || !is_letter(s[i])) return;
  const std::string_view tail = std::string_view(s).substr(i);
  const bool operators = tail.find_first_of("+=*<>") != npos || tail.find(" - ") != npos;
  const bool power_of_a_variable = tail.size() >= 2 && tail[1] == '^';
  // What the words say decides whether they are a unit, to be dropped, or part of the value, to
  // be kept (so that the answer is not the bare number: graded as its first number, the policy
  // could learn to pad). Part of the value:
  //   - a hedge: a joining word ("5 or 6", "2 and 3", "3 or -3", "5 not 6", "2 or more");
  //   - a word that scales or adds to it ("7 and a half", "5 million", "4 pi", "3 remainder 2",
  //     "5 sqrt(2)"), or a variable after it ("5 x", "3 i");
  //   - a second number after words that do not give a reason or a rate ("12 hours 30 min",
  //     "3 R 2"), where "42 because 6 times 7 is 42" and "12 eggs in 2 days" keep their number.
  // A digit stuck to a letter is the unit's (`cm2`, `CO2`).
  bool hedge_word = false, joined = false, value_word = false, reason_word = false, another_number = false;
  bool first_word = true;
  for (std::size_t k = 0; k < tail.size();) {
    if (is_letter(tail[k])) {
      std::size_t end = k;
      while (end < tail.size() && (is_letter(tail[end]) || is_digit(tail[end]))) ++end;
      const std::string word = lower_case(tail.substr(k, end - k));
      hedge_word |= is_hedge_word(word) || word == "not" || word == "to";
      joined |= word == "and";
      for (const char* scale : {"half", "halves", "quarter", "quarters", "third", "thirds", "hundred", "hundreds",
                                "thousand", "thousands", "million", "millions", "billion", "billions", "trillion",
                                "trillions", "dozen", "dozens", "pi", "sqrt", "root", "remainder", "remainders"})
        value_word |= word == scale;
      if (first_word) value_word |= word == "x" || word == "y" || word == "z" || word == "n" || word == "i";
      if (!another_number)
        for (const char* reason : {"because", "since", "as", "in", "per", "for", "each", "every", "from", "at", "after",
                                   "over", "of", "is", "was", "are", "were", "which", "that", "when", "so", "with",
                                   "by", "a", "an", "the"})
          reason_word |= word == reason;
      first_word = false;
      k = end;
    } else if ((tail[k] == '^' || tail[k] == '_') && k + 1 < tail.size()) {
      // An exponent or subscript is the unit's (`cm^2`, `cm^{2}`, `x_1`), not a second number.
      k += 2;
      if (tail[k - 1] == '{')
        for (int level = 1; k < tail.size() && level > 0; ++k) level += tail[k] == '{' ? 1 : tail[k] == '}' ? -1 : 0;
    } else {
      another_number |= is_digit(tail[k]);
      ++k;
    }
  }
  const bool hedge = hedge_word || (joined && another_number);
  const bool compound = another_number && !reason_word;
  if (operators || power_of_a_variable || hedge || value_word || compound) return;
  s.erase(gap);
}

// Whitespace goes, except between two digits, where it stays as one space: "1 2" is not 12
// (digit groups spaced as thousands are joined before, by drop_thousands_separators).
void drop_whitespace(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!is_space(s[i])) {
      out += s[i];
      continue;
    }
    std::size_t end = i;
    while (end < s.size() && is_space(s[end])) ++end;
    if (!out.empty() && is_digit(out.back()) && end < s.size() && is_digit(s[end])) out += ' ';
    i = end - 1;
  }
  s = std::move(out);
}

// `1,234,567.5` -> `1234567.5` when the whole answer is one number with comma groups of three;
// the same with single spaces between the groups (`1 234 567`, as SI writes them).
void drop_thousands_separators(std::string& s) {
  for (const char separator : {',', ' '}) {
    std::size_t i = 0;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    const std::size_t lead = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i == lead || i - lead > 3) return;
    int groups = 0;
    while (i + 3 < s.size() && s[i] == separator && is_digit(s[i + 1]) && is_digit(s[i + 2]) && is_digit(s[i + 3])) {
      i += 4;
      ++groups;
    }
    if (groups == 0) continue;
    if (i < s.size() && s[i] == '.') {
      ++i;
      while (i < s.size() && is_digit(s[i])) ++i;
    }
    if (i != s.size()) return;
    s.erase(std::remove(s.begin(), s.end(), separator), s.end());
    return;
  }
}

std::string normalize_depth(std::string_view answer, int depth);

// Splits at the commas outside any bracket; empty when there are none.
std::vector<std::string_view> top_level_items(std::string_view s) {
  std::vector<std::string_view> items;
  int level = 0;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '[' || c == '{') ++level;
    if (c == ')' || c == ']' || c == '}') --level;
    if (c == ',' && level == 0) {
      items.push_back(s.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  if (items.empty()) return items;
  items.push_back(s.substr(begin));
  return items;
}

// A tuple, interval, set or bare list, its items normalised one by one and joined by ", ".
std::optional<std::string> normalize_list(std::string_view s, int depth) {
  std::string_view open;
  std::string_view close;
  std::string_view inner = s;
  if (s.size() >= 2 && (s.front() == '(' || s.front() == '[' || starts_with(s, "\\{"))) {
    // The bracket opened first must close last: "(1,2)" is one tuple, "(1)+(2)" is not.
    int level = 0;
    std::size_t first_close = npos;
    for (std::size_t i = 0; i < s.size() && first_close == npos; ++i) {
      if (s[i] == '(' || s[i] == '[' || s[i] == '{') ++level;
      if ((s[i] == ')' || s[i] == ']' || s[i] == '}') && --level == 0) first_close = i;
    }
    if (first_close == s.size() - 1) {
      open = s.front() == '\\' ? s.substr(0, 2) : s.substr(0, 1);
      const bool escaped_close = s.back() == '}' && s[s.size() - 2] == '\\';   // `\}`
      close = escaped_close ? s.substr(s.size() - 2) : s.substr(s.size() - 1);
      if (open.size() + close.size() > s.size()) return std::nullopt;
      inner = s.substr(open.size(), s.size() - open.size() - close.size());
    }
  }
  const std::vector<std::string_view> items = top_level_items(inner);
  if (items.empty()) return std::nullopt;
  std::string out(open);
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (k > 0) out += ", ";
    out += normalize_depth(items[k], depth + 1);
  }
  out += close;
  return out;
}

// Whether `sides` is numbers and operators only: digits, + - * / ^ ( ) . = and the braces and
// commands of written arithmetic (\times, \cdot, \div, \frac, \sqrt).
bool is_arithmetic(std::string_view sides) {
  for (std::size_t i = 0; i < sides.size(); ++i) {
    const char c = sides[i];
    if (is_digit(c) || std::string_view("+-*/^().={}").find(c) != npos) continue;
    if (c != '\\') return false;
    const std::string_view name = command_name(sides, i + 1);
    if (name != "times" && name != "cdot" && name != "div" && name != "frac" && name != "sqrt") return false;
    i += name.size();
  }
  return true;
}

// The order matters: units are cut and thousands separators dropped while spaces still separate
// tokens ("5 apples", and "1, 234" stays a list), numbers are parsed once no space is left.
std::string normalize_depth(std::string_view answer, int depth) {
  if (answer.size() > kMaxAnswerBytes) return std::string(trim(answer));
  std::string s = replace_unicode(answer);
  unwrap_delimiters(s);
  s = replace_all(rewrite_commands(s), "{,}", ",");
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == '$' || c == '%'; }), s.end());
  s = std::string(trim(s));
  strip_trailing_periods(s);
  strip_leading_assignment(s);
  s = brace_arguments(s);
  drop_words_after_number(s);
  drop_thousands_separators(s);
  drop_whitespace(s);
  strip_trailing_periods(s);
  if (std::optional<std::string> number = canonical_number(s)) return *number;
  // An arithmetic chain ends in its value: "3+4=7" and "3 \times 5 = 15" are 7 and 15 (a side
  // with a letter, "2x=6", is an equation to solve, not a value, and stays as written).
  if (const std::size_t eq = s.rfind('='); eq != npos && eq > 0) {
    if (is_arithmetic(std::string_view(s.data(), eq))) {
      if (std::optional<std::string> value = canonical_number(std::string_view(s).substr(eq + 1))) return *value;
    }
  }
  // A multiple-choice letter in brackets is the letter: "(B)" and "B" (the one-item bracket is
  // no list, and was compared as the text "(b)").
  if (s.size() == 3 && (s[0] == '(' || s[0] == '[') && is_letter(s[1]) && (s[2] == ')' || s[2] == ']'))
    s = s.substr(1, 1);
  if (depth < kMaxNestingDepth) {
    if (std::optional<std::string> list = normalize_list(s, depth)) return *list;
  }
  if (s.find('\\') == npos) std::transform(s.begin(), s.end(), s.begin(), to_lower);
  return s;
}

}  // namespace

std::string normalize_answer(std::string_view answer) { return normalize_depth(answer, 0); }

bool answers_equal(std::string_view given, std::string_view reference) {
  const std::string want = normalize_answer(reference);
  return !want.empty() && normalize_answer(given) == want;
}

bool math_answer_correct(std::string_view completion, std::string_view reference) {
  const std::optional<FinalAnswer> answer = find_final_answer(completion);
  return answer && answers_equal(answer->text, reference_final_answer(reference));
}

}  // namespace shardrl
