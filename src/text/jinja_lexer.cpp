// A hand-written lexer that follows Jinja 3.1's lexer rule for rule (jinja2/lexer.py) with
// trim_blocks=True and lstrip_blocks=True, the settings transformers renders chat templates with.
#include "text/jinja_lexer.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/error.hpp"
#include "text/jinja_text.hpp"

namespace shardrl::jinja {

void throw_template_error(const std::string& origin, SourcePos pos, const std::string& what) {
  throw InputError(origin + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " + what);
}

std::string describe_token(const Token& token) {
  switch (token.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kExprBegin: return "'{{'";
    case TokenKind::kExprEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kString: return "string literal";
    case TokenKind::kInteger: return "integer literal";
    case TokenKind::kFloat: return "float literal";
    case TokenKind::kEnd: return "end of template";
    case TokenKind::kName:
    case TokenKind::kOperator: return "'" + token.value + "'";
  }
  return "token";
}

namespace {

// Jinja's operators, longest first so that "//" wins over "/".
constexpr std::array<std::string_view, 26> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
    ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Newlines as Jinja sees them: \r\n and \r become \n, and one trailing newline is dropped
// (keep_trailing_newline=False). Line numbers are unchanged by this.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin) : src_(normalize_newlines(source)), origin_(origin) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    // Whether the last match ended a line: lstrip_blocks strips before a tag at the very start too.
    bool line_starting = true;
    std::size_t pos = 0;
    while (pos < src_.size()) {
      const std::size_t tag = find_tag_start(pos);
      if (tag == std::string::npos) {
        emit_text(pos, src_.size(), pos);
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : '\0';
      std::size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(tag, &raw_body);
      emit_text(pos, stripped_text_end(pos, tag, sign, kind != '{', line_starting), pos);
      std::size_t after_open = tag + 2 + (sign != '\0' ? 1 : 0);
      if (raw) {
        pos = lex_raw(tag, raw_body, &line_starting);
      } else if (kind == '#') {
        pos = skip_comment(tag, after_open, &line_starting);
      } else {
        pos = lex_tag(tag, after_open, kind == '{', &line_starting);
      }
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.pos = pos_of(src_.size());
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(std::size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const std::size_t line_index = static_cast<std::size_t>(it - line_starts_.begin()) - 1;
    // Columns count characters; counting on from the last token of the same line keeps a
    // template written on one long line linear.
    std::size_t from = line_starts_[line_index];
    int column = 1;
    if (cached_line_ == line_index && cached_offset_ <= offset) {
      from = cached_offset_;
      column = cached_column_;
    }
    column += static_cast<int>(count_code_points(std::string_view(src_).substr(from, offset - from)));
    cached_line_ = line_index;
    cached_offset_ = offset;
    cached_column_ = column;
    SourcePos pos;
    pos.line = static_cast<int>(line_index + 1);
    pos.column = column;
    return pos;
  }

  [[noreturn]] void fail(std::size_t offset, const std::string& what) const {
    throw_template_error(origin_, pos_of(offset), what);
  }

  std::size_t find_tag_start(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  bool space_at(std::size_t offset, std::size_t* length) const {
    const std::size_t end = std::min(src_.size(), offset + 4);
    std::size_t n = 1;
    const auto lead = static_cast<unsigned char>(src_[offset]);
    if (lead >= 0xF0) n = 4;
    else if (lead >= 0xE0) n = 3;
    else if (lead >= 0xC0) n = 2;
    if (offset + n > end) return false;
    std::u32string cps;
    try {
      cps = decode_utf8(std::string_view(src_).substr(offset, n));
    } catch (const TemplateError&) {
      fail(offset, "template source is not valid UTF-8");
    }
    if (cps.size() != 1 || !is_python_space(cps[0])) return false;
    *length = n;
    return true;
  }

  std::size_t skip_spaces(std::size_t offset) const {
    std::size_t length = 0;
    while (offset < src_.size() && space_at(offset, &length)) offset += length;
    return offset;
  }

  // Where the text before a tag ends once whitespace control has been applied to it.
  std::size_t stripped_text_end(std::size_t begin, std::size_t end, char sign, bool is_block_or_comment,
                                bool line_starting) const {
    if (sign == '-') {
      // `{%-` strips all whitespace before the tag (Python's str.rstrip()).
      std::u32string cps;
      try {
        cps = decode_utf8(std::string_view(src_).substr(begin, end - begin));
      } catch (const TemplateError&) {
        fail(begin, "template source is not valid UTF-8");
      }
      std::size_t keep = cps.size();
      while (keep > 0 && is_python_space(cps[keep - 1])) --keep;
      return begin + encode_utf8(std::u32string_view(cps).substr(0, keep)).size();
    }
    if (sign == '+' || !is_block_or_comment) return end;
    // lstrip_blocks: a block or comment tag preceded on its line only by whitespace takes that
    // whitespace away.
    const std::size_t newline = src_.rfind('\n', end == 0 ? 0 : end - 1);
    const std::size_t line_begin = newline == std::string::npos || newline < begin ? begin : newline + 1;
    if (line_begin == begin && !line_starting) return end;
    if (line_begin == end) return end;
    if (skip_spaces(line_begin) != end) return end;
    return line_begin;
  }

  void emit_text(std::size_t begin, std::size_t end, std::size_t pos) {
    if (end <= begin) return;
    Token token;
    token.kind = TokenKind::kText;
    token.value = src_.substr(begin, end - begin);
    token.pos = pos_of(pos);
    tokens_.push_back(std::move(token));
  }

  void emit(TokenKind kind, std::string value, std::size_t offset) {
    Token token;
    token.kind = kind;
    token.value = std::move(value);
    token.pos = pos_of(offset);
    tokens_.push_back(std::move(token));
  }

  bool starts_with(std::size_t offset, std::string_view text) const {
    return src_.compare(offset, text.size(), text) == 0;
  }

  // {%-? raw -?%}: on success *body is where the raw text starts (after `-%}` whitespace).
  bool match_raw_begin(std::size_t tag, std::size_t* body) const {
    std::size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(p);
    if (!starts_with(p, "raw")) return false;
    p = skip_spaces(p + 3);
    if (starts_with(p, "-%}")) {
      *body = skip_spaces(p + 3);
      return true;
    }
    if (starts_with(p, "%}")) {
      *body = p + 2;
      return true;
    }
    return false;
  }

  std::size_t lex_raw(std::size_t tag, std::size_t body, bool* line_starting) {
    *line_starting = body > 0 && src_[body - 1] == '\n';
    for (std::size_t p = body; p + 1 < src_.size(); ++p) {
      if (!starts_with(p, "{%")) continue;
      std::size_t q = p + 2;
      char sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_spaces(q);
      if (!starts_with(q, "endraw")) continue;
      q = skip_spaces(q + 6);
      std::size_t after = 0;
      if (starts_with(q, "+%}")) {
        after = q + 3;
      } else if (starts_with(q, "-%}")) {
        after = skip_spaces(q + 3);
      } else if (starts_with(q, "%}")) {
        after = q + 2;
        if (after < src_.size() && src_[after] == '\n') ++after;
      } else {
        continue;
      }
      emit_text(body, stripped_text_end(body, p, sign, true, *line_starting), body);
      *line_starting = src_[after - 1] == '\n';
      return after;
    }
    fail(tag, "'{% raw %}' is never closed by '{% endraw %}'");
  }

  std::size_t skip_comment(std::size_t tag, std::size_t from, bool* line_starting) {
    for (std::size_t p = from; p + 1 < src_.size(); ++p) {
      std::size_t after = 0;
      if (starts_with(p, "+#}")) {
        after = p + 3;
      } else if (starts_with(p, "-#}")) {
        after = skip_spaces(p + 3);
      } else if (starts_with(p, "#}")) {
        after = p + 2;
        if (after < src_.size() && src_[after] == '\n') ++after;  // trim_blocks
      } else {
        continue;
      }
      *line_starting = src_[after - 1] == '\n';
      return after;
    }
    fail(tag, "comment '{#' is never closed by '#}'");
  }

  // The tokens of one {{ }} or {% %} tag; returns the offset after its end marker.
  std::size_t lex_tag(std::size_t tag, std::size_t p, bool is_expression, bool* line_starting) {
    emit(is_expression ? TokenKind::kExprBegin : TokenKind::kBlockBegin, is_expression ? "{{" : "{%", tag);
    std::vector<char> brackets;  // end markers count only where brackets balance, as in Jinja
    while (true) {
      if (p >= src_.size()) fail(tag, std::string(is_expression ? "'{{'" : "'{%'") + " is never closed");
      if (brackets.empty()) {
        std::size_t after = 0;
        if (is_expression) {
          if (starts_with(p, "-}}")) after = skip_spaces(p + 3);
          else if (starts_with(p, "}}")) after = p + 2;
        } else {
          if (starts_with(p, "+%}")) {
            after = p + 3;
          } else if (starts_with(p, "-%}")) {
            after = skip_spaces(p + 3);
          } else if (starts_with(p, "%}")) {
            after = p + 2;
            if (after < src_.size() && src_[after] == '\n') ++after;  // trim_blocks
          }
        }
        if (after != 0) {
          emit(is_expression ? TokenKind::kExprEnd : TokenKind::kBlockEnd, is_expression ? "}}" : "%}", p);
          *line_starting = src_[after - 1] == '\n';
          return after;
        }
      }
      std::size_t space = 0;
      if (space_at(p, &space)) {
        p = skip_spaces(p);
        continue;
      }
      const char c = src_[p];
      if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        std::size_t end = p;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        emit(TokenKind::kName, src_.substr(p, end - p), p);
        p = end;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, &brackets);
      }
    }
  }

  std::size_t lex_operator(std::size_t p, std::vector<char>* brackets) {
    for (std::string_view op : kOperators) {
      if (!starts_with(p, op)) continue;
      if (op == "(" || op == "[" || op == "{") {
        brackets->push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (brackets->empty()) fail(p, "unexpected '" + std::string(op) + "'");
        if (brackets->back() != op[0]) {
          fail(p, "unexpected '" + std::string(op) + "', expected '" + std::string(1, brackets->back()) + "'");
        }
        brackets->pop_back();
      }
      emit(TokenKind::kOperator, std::string(op), p);
      return p + op.size();
    }
    const auto lead = static_cast<unsigned char>(src_[p]);
    if (lead >= 0x80) fail(p, "unsupported character in a tag (names are ASCII in this Jinja subset)");
    fail(p, "unexpected character '" + std::string(1, src_[p]) + "'");
  }

  // Digits with single underscores between them: "1_000". Returns the end, or `p` if none.
  std::size_t digits_end(std::size_t p, int base) const {
    auto is_base_digit = [&](char c) {
      const int v = hex_value(c);
      return v >= 0 && v < base;
    };
    if (p >= src_.size() || !is_base_digit(src_[p])) return p;
    std::size_t end = p + 1;
    while (end < src_.size()) {
      if (is_base_digit(src_[end])) {
        ++end;
      } else if (src_[end] == '_' && end + 1 < src_.size() && is_base_digit(src_[end + 1])) {
        end += 2;
      } else {
        break;
      }
    }
    return end;
  }

  std::size_t lex_number(std::size_t p) {
    auto without_underscores = [](std::string_view text) {
      std::string out;
      for (char c : text) {
        if (c != '_') out.push_back(c);
      }
      return out;
    };
    // A float: digits, then a fraction and/or an exponent; never right after a '.' (x.0.1 is
    // two subscripts, as in Jinja).
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    const std::size_t int_end = digits_end(p, 10);
    std::size_t end = int_end;
    bool is_float = false;
    if (!after_dot) {
      if (end < src_.size() && src_[end] == '.' && digits_end(end + 1, 10) > end + 1) {
        end = digits_end(end + 1, 10);
        is_float = true;
      }
      if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
        std::size_t q = end + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (digits_end(q, 10) > q) {
          end = digits_end(q, 10);
          is_float = true;
        }
      }
    }
    if (is_float) {
      const std::string text = without_underscores(std::string_view(src_).substr(p, end - p));
      emit(TokenKind::kFloat, text, p);
      tokens_.back().real = std::strtod(text.c_str(), nullptr);
      return end;
    }
    int base = 10;
    std::size_t digits_begin = p;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char prefix = static_cast<char>(src_[p + 1] | 0x20);
      if (prefix == 'b' || prefix == 'o' || prefix == 'x') {
        base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
        // Jinja allows an underscore right after the prefix: 0x_ff.
        digits_begin = p + 2 + (p + 2 < src_.size() && src_[p + 2] == '_' ? 1 : 0);
      }
    }
    end = base == 10 ? int_end : digits_end(digits_begin, base);
    if (end == digits_begin) fail(p, "malformed integer literal");
    if (base == 10 && src_[p] == '0') {
      // Jinja's decimal integers have no leading zeros: "0", "0_0" but not "01".
      for (std::size_t i = p; i < end; ++i) {
        if (src_[i] != '0' && src_[i] != '_') fail(p, "integer literal with a leading zero");
      }
    }
    const std::string digits = without_underscores(std::string_view(src_).substr(digits_begin, end - digits_begin));
    std::int64_t value = 0;
    for (char c : digits) {
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, hex_value(c), &value)) {
        fail(p, "integer literal does not fit in 64 bits");
      }
    }
    emit(TokenKind::kInteger, src_.substr(p, end - p), p);
    tokens_.back().integer = value;
    return end;
  }

  // A quoted string with Python's escapes (Jinja decodes literals with "unicode-escape").
  std::size_t lex_string(std::size_t p) {
    const char quote = src_[p];
    std::string value;
    std::size_t i = p + 1;
    auto read_hex = [&](std::size_t at, int count) -> char32_t {
      char32_t cp = 0;
      for (int k = 0; k < count; ++k) {
        const std::size_t idx = at + static_cast<std::size_t>(k);
        const int v = idx < src_.size() ? hex_value(src_[idx]) : -1;
        if (v < 0) fail(at - 2, "truncated \\" + std::string(1, src_[at - 1]) + " escape in a string literal");
        cp = (cp << 4) | static_cast<char32_t>(v);
      }
      return cp;
    };
    auto append_code_point = [&](char32_t cp, std::size_t at) {
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(at, "escape in a string literal is not a character");
      append_utf8(value, cp);
    };
    while (true) {
      if (i >= src_.size()) fail(p, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail(p, "unterminated string literal");
      const char e = src_[i + 1];
      const std::size_t at = i;
      i += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x': append_code_point(read_hex(i, 2), at); i += 2; break;
        case 'u': append_code_point(read_hex(i, 4), at); i += 4; break;
        case 'U': append_code_point(read_hex(i, 8), at); i += 8; break;
        case 'N': fail(at, "unsupported escape \\N{...} in a string literal");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
              cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
            }
            append_code_point(cp, at);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            fail(at, "unsupported escape of a non-ASCII character in a string literal");
          } else {
            // Python keeps an unknown escape as written: '\d' is backslash, d.
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    emit(TokenKind::kString, std::move(value), p);
    return i + 1;
  }

  std::string src_;
  const std::string& origin_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
  mutable std::size_t cached_line_ = static_cast<std::size_t>(-1);
  mutable std::size_t cached_offset_ = 0;
  mutable int cached_column_ = 1;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source, const std::string& origin) {
  return Lexer(source, origin).run();
}

}  // namespace shardrl::jinja
