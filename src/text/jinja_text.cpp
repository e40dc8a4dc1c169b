// Python `str` semantics on UTF-8 text (see jinja_text.hpp). Unicode properties and case mappings
// come from utf8proc; nothing here carries its own Unicode table.
#include "text/jinja_text.hpp"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shardrl::jinja {

namespace {

bool is_cased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

char32_t to_lower(char32_t cp) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_upper(char32_t cp) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_title(char32_t cp) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

// Python's str.isprintable() for one code point: not a control, format, surrogate, private-use,
// unassigned or separator character, except the ASCII space.
bool is_python_printable(char32_t cp) {
  if (cp == U' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

void append_hex(std::string& out, const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*x", digits, value);
  out += prefix;
  out += buf;
}

bool contains(std::u32string_view set, char32_t cp) { return set.find(cp) != std::u32string_view::npos; }

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    int length = 0;
    char32_t cp = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2;
      cp = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      cp = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      cp = lead & 0x07;
    } else {
      throw TemplateError("text is not valid UTF-8");
    }
    if (i + static_cast<std::size_t>(length) > text.size()) throw TemplateError("text is not valid UTF-8");
    for (int k = 1; k < length; ++k) {
      const unsigned char next = bytes[i + static_cast<std::size_t>(k)];
      if ((next & 0xC0) != 0x80) throw TemplateError("text is not valid UTF-8");
      cp = (cp << 6) | (next & 0x3F);
    }
    const bool overlong = (length == 2 && cp < 0x80) || (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) throw TemplateError("text is not valid UTF-8");
    out.push_back(cp);
    i += static_cast<std::size_t>(length);
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::size_t count_code_points(std::string_view text) {
  std::size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

bool is_python_space(char32_t cp) {
  if (cp < 0x80) return cp == U' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  const auto* property = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return property->category == UTF8PROC_CATEGORY_ZS || property->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         property->bidi_class == UTF8PROC_BIDI_CLASS_B || property->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

std::string python_lower(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  for (char32_t& cp : cps) cp = to_lower(cp);
  return encode_utf8(cps);
}

std::string python_upper(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  for (char32_t& cp : cps) cp = to_upper(cp);
  return encode_utf8(cps);
}

std::string python_capitalize(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  for (std::size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_title(cps[i]) : to_lower(cps[i]);
  return encode_utf8(cps);
}

std::string python_title(std::string_view text) {
  std::u32string cps = decode_utf8(text);
  bool previous_is_cased = false;
  for (char32_t& cp : cps) {
    const char32_t original = cp;
    cp = previous_is_cased ? to_lower(cp) : to_title(cp);
    previous_is_cased = is_cased(original);
  }
  return encode_utf8(cps);
}

std::string jinja_title_filter(std::string_view text) {
  // Jinja splits on the regex ([-\s({\[<]+) and applies item[0].upper() + item[1:].lower() to
  // every piece; on the separator pieces that is the identity.
  std::u32string cps = decode_utf8(text);
  bool at_word_start = true;
  for (char32_t& cp : cps) {
    const bool separator = cp == U'-' || cp == U'(' || cp == U'{' || cp == U'[' || cp == U'<' || is_python_space(cp);
    if (separator) {
      at_word_start = true;
      continue;
    }
    cp = at_word_start ? to_upper(cp) : to_lower(cp);
    at_word_start = false;
  }
  return encode_utf8(cps);
}

std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(text);
  const std::u32string strip_set = chars ? decode_utf8(*chars) : std::u32string();
  auto strips = [&](char32_t cp) { return chars ? contains(strip_set, cp) : is_python_space(cp); };
  std::size_t begin = 0;
  std::size_t end = cps.size();
  if (left) {
    while (begin < end && strips(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strips(cps[end - 1])) --end;
  }
  return encode_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      std::int64_t maxsplit) {
  std::vector<std::string> parts;
  std::int64_t splits_left = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (sep) {
    if (sep->empty()) throw TemplateError("split(): empty separator");
    std::size_t start = 0;
    while (splits_left-- > 0) {
      const std::size_t found = text.find(*sep, start);
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, found - start));
      start = found + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  const std::u32string cps = decode_utf8(text);
  std::size_t i = 0;
  const std::size_t n = cps.size();
  while (splits_left-- > 0) {
    while (i < n && is_python_space(cps[i])) ++i;
    if (i == n) break;
    const std::size_t j = i;
    while (i < n && !is_python_space(cps[i])) ++i;
    parts.push_back(encode_utf8(std::u32string_view(cps).substr(j, i - j)));
  }
  if (i < n) {  // maxsplit reached: the rest, leading whitespace skipped
    while (i < n && is_python_space(cps[i])) ++i;
    if (i < n) parts.push_back(encode_utf8(std::u32string_view(cps).substr(i)));
  }
  return parts;
}

std::vector<std::string> python_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                       std::int64_t maxsplit) {
  std::vector<std::string> parts;
  std::int64_t splits_left = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (sep) {
    if (sep->empty()) throw TemplateError("rsplit(): empty separator");
    std::size_t end = text.size();
    while (splits_left-- > 0) {
      if (end < sep->size()) break;
      const std::size_t found = text.rfind(*sep, end - sep->size());
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(found + sep->size(), end - found - sep->size()));
      end = found;
    }
    parts.emplace_back(text.substr(0, end));
  } else {
    const std::u32string cps = decode_utf8(text);
    std::size_t i = cps.size();
    while (splits_left-- > 0) {
      while (i > 0 && is_python_space(cps[i - 1])) --i;
      if (i == 0) break;
      const std::size_t j = i;
      while (i > 0 && !is_python_space(cps[i - 1])) --i;
      parts.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
    }
    if (i > 0) {
      while (i > 0 && is_python_space(cps[i - 1])) --i;
      if (i > 0) parts.push_back(encode_utf8(std::u32string_view(cps).substr(0, i)));
    }
  }
  return {parts.rbegin(), parts.rend()};
}

std::string python_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                           std::int64_t count) {
  std::int64_t left = count < 0 ? INT64_MAX : count;
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end, `count` times at most.
    const std::u32string cps = decode_utf8(text);
    for (char32_t cp : cps) {
      if (left > 0) {
        out += new_text;
        --left;
      }
      append_utf8(out, cp);
    }
    if (left > 0) out += new_text;
    return out;
  }
  std::size_t start = 0;
  while (left > 0) {
    const std::size_t found = text.find(old_text, start);
    if (found == std::string_view::npos) break;
    out += text.substr(start, found - start);
    out += new_text;
    start = found + old_text.size();
    --left;
  }
  out += text.substr(start);
  return out;
}

std::vector<std::string> python_splitlines(std::string_view text) {
  const std::u32string cps = decode_utf8(text);
  std::vector<std::string> lines;
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < cps.size()) {
    const char32_t cp = cps[i];
    const bool boundary = cp == U'\n' || cp == U'\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
                          cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!boundary) {
      ++i;
      continue;
    }
    lines.push_back(encode_utf8(std::u32string_view(cps).substr(start, i - start)));
    i += (cp == U'\r' && i + 1 < cps.size() && cps[i + 1] == U'\n') ? 2 : 1;
    start = i;
  }
  if (start < cps.size()) lines.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string python_repr_string(std::string_view text) {
  const std::u32string cps = decode_utf8(text);
  const bool has_single = contains(cps, U'\'');
  const bool has_double = contains(cps, U'"');
  const char32_t quote = has_single && !has_double ? U'"' : U'\'';
  std::string out;
  append_utf8(out, quote);
  for (char32_t cp : cps) {
    if (cp == quote || cp == U'\\') {
      out.push_back('\\');
      append_utf8(out, cp);
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp < 0x7F || is_python_printable(cp)) {
      append_utf8(out, cp);
    } else if (cp < 0x100) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp < 0x10000) {
      append_hex(out, "\\u", cp, 4);
    } else {
      append_hex(out, "\\U", cp, 8);
    }
  }
  append_utf8(out, quote);
  return out;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view scientific(buf, static_cast<std::size_t>(result.ptr - buf));  // "-1.25e+17"
  std::string out;
  if (scientific.front() == '-') {
    out.push_back('-');
    scientific.remove_prefix(1);
  }
  const std::size_t e = scientific.find('e');
  std::string digits;
  for (char c : scientific.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::atoi(std::string(scientific.substr(e + 1)).c_str());
  // CPython's repr: value = 0.DIGITS * 10^decpt; exponent notation when decpt <= -4 or > 16.
  const int decpt = exponent + 1;
  if (decpt > -4 && decpt <= 16) {
    const auto size = static_cast<int>(digits.size());
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
    } else if (decpt >= size) {
      out += digits + std::string(static_cast<std::size_t>(decpt - size), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_buf;
  return out;
}

std::string json_quote_string(std::string_view text, bool ensure_ascii) {
  std::string out = "\"";
  auto escape_code_unit = [&](unsigned unit) { append_hex(out, "\\u", unit, 4); };
  const std::u32string cps = decode_utf8(text);
  for (char32_t cp : cps) {
    switch (cp) {
      case U'"': out += "\\\""; continue;
      case U'\\': out += "\\\\"; continue;
      case U'\n': out += "\\n"; continue;
      case U'\r': out += "\\r"; continue;
      case U'\t': out += "\\t"; continue;
      case U'\b': out += "\\b"; continue;
      case U'\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20) {
      escape_code_unit(cp);
    } else if (cp < 0x80 || !ensure_ascii) {
      append_utf8(out, cp);
    } else if (cp < 0x10000) {
      escape_code_unit(cp);
    } else {
      const char32_t v = cp - 0x10000;
      escape_code_unit(0xD800 | (v >> 10));
      escape_code_unit(0xDC00 | (v & 0x3FF));
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace shardrl::jinja
