// The lexer of the Jinja subset Hugging Face chat templates use: template text and the tokens
// inside {{ }} and {% %}, with Jinja's whitespace control applied as transformers configures it
// (trim_blocks, lstrip_blocks, the `-` and `+` markers). Comments are dropped; {% raw %} becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardrl::jinja {

// 1-based line and column (counted in characters) in the template source.
struct SourcePos {
  int line = 1;
  int column = 1;
};

// Every problem with a template ends here: InputError "<origin>:<line>:<column>: <what>".
[[noreturn]] void throw_template_error(const std::string& origin, SourcePos pos, const std::string& what);

enum class TokenKind {
  kText,        // template data between tags
  kExprBegin,   // {{
  kExprEnd,     // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value: the literal, escapes decoded
  kInteger,
  kFloat,
  kOperator,    // value: the spelling, e.g. "//", "==", "("
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string value;
  std::int64_t integer = 0;
  double real = 0.0;
  SourcePos pos;
};

// The tokens of `source`, ending with kEnd. A lexical error is an InputError naming origin and place.
std::vector<Token> lex_template(std::string_view source, const std::string& origin);

// How a token reads in an error message: "'endfor'", "end of template", "'}}'".
std::string describe_token(const Token& token);

}  // namespace shardrl::jinja
