// Python `str` semantics on UTF-8 text, for the Jinja evaluator: code points, str.isspace(),
// strip/split/replace, case mapping (utf8proc), repr() and json.dumps() quoting, float repr().
// Python strings are code point sequences, so every length, index and slice here counts code points.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace shardrl::jinja {

// An error found while evaluating a template, before its place is known: the evaluator catches it
// at the innermost expression and rethrows it as an InputError naming origin and line:column.
class TemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Code points of UTF-8 text; TemplateError on malformed UTF-8 (a Python str cannot hold it).
std::u32string decode_utf8(std::string_view text);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view cps);
std::size_t count_code_points(std::string_view text);   // of valid UTF-8

// str.isspace() for one code point: Unicode category Zs or bidirectional class WS, B or S.
bool is_python_space(char32_t cp);

// str.lower(), str.upper(), str.capitalize(), str.title() with utf8proc's one-to-one case mappings:
// where Python's full mapping gives several characters or depends on context ('ß'.upper() is "SS",
// final sigma), these differ ('ß' upper-cases to 'ẞ'), see chat_template.hpp.
std::string python_lower(std::string_view text);
std::string python_upper(std::string_view text);
std::string python_capitalize(std::string_view text);
std::string python_title(std::string_view text);
// Jinja's `title` filter (not str.title): upper-cases the first character after a run of
// whitespace, '-', '(', '{', '[' or '<' and lower-cases the rest.
std::string jinja_title_filter(std::string_view text);

// str.strip(chars) / lstrip / rstrip: `chars` absent means whitespace.
std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right);
// str.split(sep, maxsplit) and str.rsplit: sep absent means runs of whitespace; maxsplit < 0 means
// no limit. TemplateError on an empty separator.
std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      std::int64_t maxsplit);
std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                       std::int64_t maxsplit);
// str.replace(old, new, count): count < 0 means all; an empty `old` inserts between characters.
std::string python_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                           std::int64_t count);
// str.splitlines() (without keepends): the line boundaries Python recognises.
std::vector<std::string> python_splitlines(std::string_view text);

// repr(str): quotes and escapes as Python does ('it''s' -> "it's", non-printable -> \xNN, \uNNNN).
std::string python_repr_string(std::string_view text);
// repr(float): shortest round-trip digits, "1.0", "1e+16", "1e-05", "inf", "nan".
std::string python_float_repr(double value);
// json.dumps(str, ensure_ascii=...): a JSON string literal as Python's encoder writes it.
std::string json_quote_string(std::string_view text, bool ensure_ascii);

}  // namespace shardrl::jinja
