// Numbers of final answers as exact values (rl/exact_number.hpp): a decimal as its digits and
// exponent, of any size; a rational in 128-bit integers, every product and sum overflow-checked.
#include "rl/exact_number.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "rl/math_text.hpp"

namespace shardrl {
namespace {

using namespace math_text;
using Int = __int128;
using UInt = unsigned __int128;

// |exponent| of a number in scientific notation; beyond it the text is not a number.
constexpr long kMaxExponent = 10000;

// ±digits × 10^exponent, digits without leading or trailing zeros (empty for zero): one
// representation per value, of any size.
struct Decimal {
  bool negative = false;
  std::string digits;
  long exponent = 0;
};

// p/q, q > 0, reduced.
struct Rational {
  Int num = 0;
  Int den = 1;
};

bool checked_mul(Int a, Int b, Int& out) { return !__builtin_mul_overflow(a, b, &out); }
bool checked_add(Int a, Int b, Int& out) { return !__builtin_add_overflow(a, b, &out); }

Int gcd(Int a, Int b) {   // of non-negative values
  while (b != 0) {
    const Int r = a % b;
    a = b;
    b = r;
  }
  return a;
}

std::optional<Rational> make_rational(Int num, Int den) {
  if (den == 0) return std::nullopt;
  const Int kMin = static_cast<Int>(static_cast<UInt>(1) << 127);
  if (num == kMin || den == kMin) return std::nullopt;   // cannot be negated
  if (den < 0) {
    num = -num;
    den = -den;
  }
  const Int g = gcd(num < 0 ? -num : num, den);
  return Rational{num / g, den / g};
}

std::string int_to_string(Int v) {
  UInt u = v < 0 ? static_cast<UInt>(0) - static_cast<UInt>(v) : static_cast<UInt>(v);
  std::string out;
  do {
    out.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  } while (u != 0);
  if (v < 0) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

std::string rational_to_string(const Rational& r) {
  return r.den == 1 ? int_to_string(r.num) : int_to_string(r.num) + "/" + int_to_string(r.den);
}

std::string decimal_to_string(const Decimal& d) {
  if (d.digits.empty()) return "0";
  std::string out = d.negative ? "-" : "";
  const long length = static_cast<long>(d.digits.size());
  if (d.exponent >= 0) {
    out += d.digits;
    out.append(static_cast<std::size_t>(d.exponent), '0');
  } else if (-d.exponent < length) {
    out += d.digits.substr(0, static_cast<std::size_t>(length + d.exponent));
    out += '.';
    out += d.digits.substr(static_cast<std::size_t>(length + d.exponent));
  } else {
    out += "0.";
    out.append(static_cast<std::size_t>(-d.exponent - length), '0');
    out += d.digits;
  }
  return out;
}

// Unsigned digits at `i` (advanced past them) into `value`; false when none or beyond kMaxExponent.
bool parse_exponent_digits(std::string_view s, std::size_t& i, long& value) {
  const std::size_t begin = i;
  value = 0;
  while (i < s.size() && is_digit(s[i])) {
    value = value * 10 + (s[i] - '0');
    if (value > kMaxExponent) return false;
    ++i;
  }
  return i > begin;
}

// A signed exponent at `i`: `e-3`, `E+3`, `\times10^{3}`, `\times10^3`, `\cdot10^{-3}`. Leaves
// `i` unchanged and returns 0 when there is none; nullopt when one is there but out of range.
std::optional<long> parse_exponent(std::string_view s, std::size_t& i) {
  std::size_t j = i;
  bool braced = false;
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
    ++j;
  } else if (starts_with(s.substr(j), "\\times10^") || starts_with(s.substr(j), "\\cdot10^")) {
    j += s[j + 1] == 't' ? 9 : 8;
    if (j < s.size() && s[j] == '{') {
      braced = true;
      ++j;
    }
  } else {
    return 0;
  }
  bool negative = false;
  if (j < s.size() && (s[j] == '+' || s[j] == '-')) negative = s[j++] == '-';
  long value = 0;
  if (!parse_exponent_digits(s, j, value)) {
    return j < s.size() && is_digit(s[j]) ? std::nullopt : std::optional<long>(0);   // `2e` is no exponent
  }
  if (braced) {
    if (j >= s.size() || s[j] != '}') return 0;
    ++j;
  }
  i = j;
  return negative ? -value : value;
}

// A decimal number at `i`: [+-] digits [. digits] [exponent] (or .digits); `i` advances past it.
std::optional<Decimal> parse_decimal(std::string_view s, std::size_t& i) {
  std::size_t j = i;
  Decimal d;
  if (j < s.size() && (s[j] == '+' || s[j] == '-')) d.negative = s[j++] == '-';
  const std::size_t int_begin = j;
  while (j < s.size() && is_digit(s[j])) ++j;
  std::string_view int_part = s.substr(int_begin, j - int_begin);
  std::string_view frac_part;
  if (j < s.size() && s[j] == '.') {
    const std::size_t frac_begin = j + 1;
    std::size_t k = frac_begin;
    while (k < s.size() && is_digit(s[k])) ++k;
    frac_part = s.substr(frac_begin, k - frac_begin);
    if (!int_part.empty() || !frac_part.empty()) j = k;
  }
  if (int_part.empty() && frac_part.empty()) return std::nullopt;
  const std::optional<long> exponent = parse_exponent(s, j);
  if (!exponent) return std::nullopt;
  d.digits = std::string(int_part) + std::string(frac_part);
  d.exponent = *exponent - static_cast<long>(frac_part.size());
  const std::size_t first = d.digits.find_first_not_of('0');
  if (first == npos) {
    d = Decimal{};
  } else {
    d.digits.erase(0, first);
    const std::size_t last = d.digits.find_last_not_of('0');
    d.exponent += static_cast<long>(d.digits.size() - 1 - last);
    d.digits.erase(last + 1);
  }
  i = j;
  return d;
}

std::optional<Rational> to_rational(const Decimal& d) {
  Int value = 0;
  for (const char c : d.digits) {
    if (!checked_mul(value, 10, value) || !checked_add(value, c - '0', value)) return std::nullopt;
  }
  Int den = 1;
  Int& scaled = d.exponent < 0 ? den : value;   // 10^|exponent| multiplies one side
  const long shifts = d.exponent < 0 ? -d.exponent : d.exponent;
  for (long k = 0; k < shifts; ++k) {
    if (!checked_mul(scaled, 10, scaled)) return std::nullopt;
  }
  return make_rational(d.negative ? -value : value, den);
}

std::optional<Rational> divide(const Rational& a, const Rational& b) {
  Int num = 0;
  Int den = 0;
  if (!checked_mul(a.num, b.den, num) || !checked_mul(a.den, b.num, den)) return std::nullopt;
  return make_rational(num, den);
}

// The whole of `s` as one decimal number that fits a Rational.
std::optional<Rational> parse_whole_rational(std::string_view s) {
  std::size_t i = 0;
  const std::optional<Decimal> d = parse_decimal(s, i);
  if (!d || i != s.size()) return std::nullopt;
  return to_rational(*d);
}

// `base` to the integer power written in `exponent` (`3`, `{10}`, `{-3}`), exact: `2^{10}` is 1024
// and `10^{-3}` is 1/1000 (they were text, unequal to 1024 and 0.001). A sign before the base is
// the power's, as in mathematics: -2^2 is -4. Past 128-bit integers: nullopt (compared as text).
std::optional<std::string> integer_power(Decimal base, std::string_view exponent) {
  const bool braced = !exponent.empty() && exponent.front() == '{';
  if (braced) {
    if (exponent.size() < 2 || exponent.back() != '}') return std::nullopt;
    exponent = exponent.substr(1, exponent.size() - 2);
  }
  bool inverse = false;
  if (!exponent.empty() && (exponent.front() == '-' || exponent.front() == '+')) {
    inverse = exponent.front() == '-';
    exponent.remove_prefix(1);
  }
  if (exponent.empty() || exponent.size() > 3) return std::nullopt;
  long power = 0;
  for (const char c : exponent) {
    if (!is_digit(c)) return std::nullopt;
    power = power * 10 + (c - '0');
  }
  const bool negative = base.negative;
  base.negative = false;
  const std::optional<Rational> b = to_rational(base);
  if (!b) return std::nullopt;
  Rational r;
  r.num = 1;
  for (long k = 0; k < power; ++k)
    if (!checked_mul(r.num, b->num, r.num) || !checked_mul(r.den, b->den, r.den)) return std::nullopt;
  if (inverse) {
    if (r.num == 0) return std::nullopt;
    std::swap(r.num, r.den);
  }
  const std::optional<Rational> value = make_rational(negative ? -r.num : r.num, r.den);
  return value ? std::optional<std::string>(rational_to_string(*value)) : std::nullopt;
}

// The whole of `s` as `\frac{a}{b}` of two decimal numbers: a and b.
std::optional<std::pair<Rational, Rational>> parse_frac(std::string_view s) {
  if (!starts_with(s, "\\frac{")) return std::nullopt;
  const std::size_t open1 = 5;
  const std::size_t close1 = closing_brace(s, open1);
  if (close1 == npos || close1 + 1 >= s.size() || s[close1 + 1] != '{') return std::nullopt;
  const std::size_t close2 = closing_brace(s, close1 + 1);
  if (close2 + 1 != s.size()) return std::nullopt;
  const auto num = parse_whole_rational(s.substr(open1 + 1, close1 - open1 - 1));
  const auto den = parse_whole_rational(s.substr(close1 + 2, close2 - close1 - 2));
  if (!num || !den) return std::nullopt;
  return std::make_pair(*num, *den);
}

// A mixed number as competition answers write it: `3\frac{1}{2}` is 7/2, `-2\frac{1}{3}` is
// -7/3 (they were text, unequal to 3.5 and \frac{7}{2}). Only an integer before a proper
// fraction of integers: `2\frac{3}{2}` or `1.5\frac{1}{2}` reads as no number at all.
std::optional<std::string> mixed_number(std::string_view whole, const Decimal& w, std::string_view fraction) {
  const auto parts = parse_frac(fraction);
  if (!parts) return std::nullopt;
  const auto [a, b] = *parts;
  const bool integers = a.den == 1 && b.den == 1;
  if (!integers || a.num <= 0 || a.num >= b.num) return std::nullopt;
  if (whole.find_first_not_of("+-0123456789") != npos) return std::nullopt;
  const std::optional<Rational> n = to_rational(w);
  if (!n || n->den != 1) return std::nullopt;
  Int magnitude = n->num < 0 ? -n->num : n->num;
  Int num = 0;
  if (!checked_mul(magnitude, b.num, num) || !checked_add(num, a.num, num)) return std::nullopt;
  const std::optional<Rational> value = make_rational(w.negative ? -num : num, b.num);
  return value ? std::optional<std::string>(rational_to_string(*value)) : std::nullopt;
}

}  // namespace

std::optional<std::string> canonical_number(std::string_view s) {
  std::size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) negative = s[i++] == '-';
  if (const auto parts = parse_frac(s.substr(i))) {
    auto value = divide(parts->first, parts->second);
    if (!value) return std::nullopt;
    if (negative) value->num = -value->num;
    return rational_to_string(*value);
  }
  i = 0;
  const std::optional<Decimal> d = parse_decimal(s, i);
  if (!d) return std::nullopt;
  if (i == s.size()) {
    const std::optional<Rational> value = to_rational(*d);
    return value ? rational_to_string(*value) : decimal_to_string(*d);
  }
  if (s[i] == '^') return integer_power(*d, s.substr(i + 1));
  if (s[i] == '\\') return mixed_number(s.substr(0, i), *d, s.substr(i));
  if (s[i] != '/') return std::nullopt;
  const std::optional<Rational> num = to_rational(*d);
  const std::optional<Rational> den = parse_whole_rational(s.substr(i + 1));
  if (!num || !den) return std::nullopt;
  const std::optional<Rational> value = divide(*num, *den);
  return value ? std::optional<std::string>(rational_to_string(*value)) : std::nullopt;
}

}  // namespace shardrl
