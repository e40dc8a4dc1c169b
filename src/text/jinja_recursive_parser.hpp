// The recursive-descent parser of Jinja templates (jinja_parser.hpp), private to its two files:
// the statements in jinja_parser.cpp, the expressions in jinja_expressions.cpp. One Parser reads
// one template's tokens once, front to back.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja_parser.hpp"

namespace shardrl::jinja::detail {

// Nesting deeper than this is refused rather than risking the stack on a hostile template.
constexpr int kMaxNesting = 200;

inline bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin) : tokens_(tokens), origin_(origin) {}

  Program parse() {
    Program program;
    program.body = parse_body({}, nullptr, SourcePos{}, "");
    return program;
  }

 private:
  // --- token stream -------------------------------------------------------------------------
  const Token& current() const { return tokens_[index_]; }
  const Token& look(std::size_t ahead = 1) const { return tokens_[std::min(index_ + ahead, tokens_.size() - 1)]; }
  void advance() {
    if (index_ + 1 < tokens_.size()) ++index_;
  }
  bool at(TokenKind kind) const { return current().kind == kind; }
  bool at_operator(std::string_view op) const { return at(TokenKind::kOperator) && current().value == op; }
  bool at_name(std::string_view name) const { return at(TokenKind::kName) && current().value == name; }
  bool skip_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(SourcePos pos, const std::string& what) const { throw_template_error(origin_, pos, what); }
  [[noreturn]] void fail_expected(const std::string& expected) const {
    fail(current().pos, "expected " + expected + ", got " + describe_token(current()));
  }
  Token expect(TokenKind kind, const std::string& description) {
    if (!at(kind)) fail_expected(description);
    Token token = current();
    advance();
    return token;
  }
  void expect_operator(std::string_view op) {
    if (!skip_operator(op)) fail_expected("'" + std::string(op) + "'");
  }
  void expect_block_end() { expect(TokenKind::kBlockEnd, "'%}'"); }

  struct NestingGuard {
    NestingGuard(Parser& parser, SourcePos pos) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) parser_.fail(pos, "template nests too deeply (more than 200 levels)");
    }
    ~NestingGuard() { --parser_.depth_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;
    Parser& parser_;
  };
  // The steps of a left-associative chain (a + b + ..., x.a[0].b, x|f|g, t if c else ...): each
  // makes the tree a level deeper without a recursive call, so each counts as a level until the
  // chain ends (a chain of 20,000 terms built a tree whose evaluation overflowed the stack).
  struct ChainGuard {
    explicit ChainGuard(Parser& parser) : parser_(parser) {}
    void step(SourcePos pos) {
      ++steps_;
      if (++parser_.depth_ > kMaxNesting) parser_.fail(pos, "template nests too deeply (more than 200 levels)");
    }
    ~ChainGuard() { parser_.depth_ -= steps_; }
    ChainGuard(const ChainGuard&) = delete;
    ChainGuard& operator=(const ChainGuard&) = delete;
    Parser& parser_;
    int steps_ = 0;
  };

  static ExprPtr make(Expr::Kind kind, SourcePos pos) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->pos = pos;
    return expr;
  }

  // --- statements ---------------------------------------------------------------------------
  NodeList parse_body(std::initializer_list<std::string_view> ends, std::string* end_found, SourcePos opener,
                      std::string_view opener_name);
  void parse_statement(NodeList& out, std::initializer_list<std::string_view> enclosing_ends);
  void parse_for(NodeList& out);
  void parse_if(NodeList& out);
  void parse_set(NodeList& out);
  void parse_macro(NodeList& out);
  void parse_filter_block(NodeList& out);
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const;
  std::string expect_assignable_name();
  AssignTarget parse_assign_target(std::initializer_list<std::string_view> extra_end, bool with_namespace);

  // --- expressions --------------------------------------------------------------------------
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses);
  ExprPtr parse_expression() { return parse_condition(); }
  ExprPtr parse_condition();
  ExprPtr parse_binary_chain(Expr::Kind kind, std::string_view keyword, ExprPtr (Parser::*next)());
  ExprPtr parse_or() { return parse_binary_chain(Expr::Kind::kOr, "or", &Parser::parse_and); }
  ExprPtr parse_and() { return parse_binary_chain(Expr::Kind::kAnd, "and", &Parser::parse_not); }
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_arithmetic(std::initializer_list<std::string_view> ops, ExprPtr (Parser::*next)());
  ExprPtr parse_math1() { return parse_arithmetic({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat();
  ExprPtr parse_math2() { return parse_arithmetic({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_arithmetic({"**"}, &Parser::parse_unary_with_filters); }
  ExprPtr parse_unary_with_filters() { return parse_unary(true); }
  ExprPtr parse_unary(bool with_filters);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expression(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr object);
  void parse_call_arguments(Expr& call);
  ExprPtr parse_call(ExprPtr callee);
  std::string parse_dotted_name(const Token& first);
  ExprPtr parse_filters(ExprPtr subject, bool start_inline);
  ExprPtr parse_test(ExprPtr subject);

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  std::size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace shardrl::jinja::detail
