// A recursive-descent parser with Jinja 3.1's grammar: condexpr < or < and < not < compare
// (chained) < + - < ~ < * / // % < ** < unary - + < primary with postfix . [] () and | filters and
// `is` tests. Statements: if, for, set, macro, filter, break, continue, print and transformers'
// generation tag; every other statement, filter or test is refused by name. This file: the
// template's body and its statements; the expressions are in jinja_expressions.cpp.
#include "text/jinja_parser.hpp"

#include "text/jinja_recursive_parser.hpp"

namespace shardrl::jinja {

namespace detail {

// Nodes up to one of the tags `ends` (the closing one first: endfor, else), whose name is stored
// in *end_found with `{% name` consumed; at top level (no ends) up to the end of the template.
NodeList Parser::parse_body(std::initializer_list<std::string_view> ends, std::string* end_found, SourcePos opener,
                          std::string_view opener_name) {
  NodeList nodes;
  while (true) {
    switch (current().kind) {
      case TokenKind::kEnd:
        if (ends.size() == 0) return nodes;
        fail(opener, "'{% " + std::string(opener_name) + " %}' is never closed (expected '{% " +
                         std::string(*ends.begin()) + " %}')");
      case TokenKind::kText: {
        Node node;
        node.kind = Node::Kind::kText;
        node.pos = current().pos;
        node.text = current().value;
        nodes.push_back(std::move(node));
        advance();
        break;
      }
      case TokenKind::kExprBegin: {
        advance();
        Node node;
        node.kind = Node::Kind::kOutput;
        node.pos = current().pos;
        node.expr = parse_tuple(false, true, {}, false);
        expect(TokenKind::kExprEnd, "'}}'");
        nodes.push_back(std::move(node));
        break;
      }
      case TokenKind::kBlockBegin:
        if (look().kind == TokenKind::kName && one_of(look().value, ends)) {
          advance();
          *end_found = current().value;
          advance();
          return nodes;
        }
        parse_statement(nodes, ends);
        break;
      default:
        fail_expected("template text or a tag");
    }
  }
}

void Parser::parse_statement(NodeList& out, std::initializer_list<std::string_view> enclosing_ends) {
  advance();  // {%
  const Token keyword = current();
  if (keyword.kind != TokenKind::kName) fail_expected("a statement name");
  const NestingGuard guard(*this, keyword.pos);
  const std::string& name = keyword.value;
  if (name == "for") return parse_for(out);
  if (name == "if") return parse_if(out);
  if (name == "set") return parse_set(out);
  if (name == "macro") return parse_macro(out);
  if (name == "filter") return parse_filter_block(out);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail(keyword.pos, "'{% " + name + " %}' outside a for loop");
    advance();
    expect_block_end();
    Node node;
    node.kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    node.pos = keyword.pos;
    out.push_back(std::move(node));
    return;
  }
  if (name == "print") {
    advance();
    bool first = true;
    while (!at(TokenKind::kBlockEnd)) {
      if (!first) expect_operator(",");
      first = false;
      Node node;
      node.kind = Node::Kind::kOutput;
      node.pos = keyword.pos;
      node.expr = parse_expression();
      out.push_back(std::move(node));
    }
    expect_block_end();
    return;
  }
  if (name == "generation") {
    // transformers' AssistantTracker tag marks assistant text for a mask; rendering is unchanged.
    advance();
    expect_block_end();
    std::string end;
    NodeList body = parse_body({"endgeneration"}, &end, keyword.pos, "generation");
    expect_block_end();
    for (Node& node : body) out.push_back(std::move(node));
    return;
  }
  if (one_of(name, {"include", "import", "from", "extends", "block", "with", "autoescape", "call", "do", "trans",
                    "raw"})) {
    fail(keyword.pos, "unsupported statement '{% " + name + " %}' (outside the Jinja subset of chat templates)");
  }
  if (one_of(name, {"elif", "else", "endif", "endfor", "endmacro", "endset", "endfilter", "endgeneration", "endraw",
                    "endcall", "endblock", "endwith", "endautoescape"})) {
    std::string expected;
    if (enclosing_ends.size() != 0) expected = " (expected '{% " + std::string(*enclosing_ends.begin()) + " %}')";
    fail(keyword.pos, "unexpected '{% " + name + " %}'" + expected);
  }
  fail(keyword.pos, "unknown statement '{% " + name + " %}'");
}

void Parser::parse_for(NodeList& out) {
  Node node;
  node.kind = Node::Kind::kFor;
  node.pos = current().pos;
  advance();
  node.target = parse_assign_target({"in"}, false);
  if (!skip_name("in")) fail_expected("'in'");
  node.expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) node.condition = parse_expression();
  if (at_name("recursive")) fail(current().pos, "unsupported recursive for loop ('{% for ... recursive %}')");
  expect_block_end();
  ++loop_depth_;
  std::string end;
  node.body = parse_body({"endfor", "else"}, &end, node.pos, "for");
  --loop_depth_;
  if (end == "else") {
    expect_block_end();
    node.else_body = parse_body({"endfor"}, &end, node.pos, "for");
  }
  expect_block_end();
  out.push_back(std::move(node));
}

void Parser::parse_if(NodeList& out) {
  Node node;
  node.kind = Node::Kind::kIf;
  node.pos = current().pos;
  advance();
  std::string end = "elif";
  while (end == "elif") {
    ExprPtr condition = parse_tuple(false, false, {}, false);
    expect_block_end();
    NodeList body = parse_body({"endif", "elif", "else"}, &end, node.pos, "if");
    node.branches.emplace_back(std::move(condition), std::move(body));
  }
  if (end == "else") {
    expect_block_end();
    node.else_body = parse_body({"endif"}, &end, node.pos, "if");
  }
  expect_block_end();
  out.push_back(std::move(node));
}

void Parser::parse_set(NodeList& out) {
  Node node;
  node.pos = current().pos;
  advance();
  node.target = parse_assign_target({}, true);
  if (skip_operator("=")) {
    node.kind = Node::Kind::kSet;
    node.expr = parse_tuple(false, true, {}, false);
    expect_block_end();
    out.push_back(std::move(node));
    return;
  }
  node.kind = Node::Kind::kSetBlock;
  if (at_operator("|")) node.expr = parse_filters(nullptr, false);
  expect_block_end();
  std::string end;
  node.body = parse_body({"endset"}, &end, node.pos, "set");
  expect_block_end();
  out.push_back(std::move(node));
}

void Parser::parse_macro(NodeList& out) {
  Node node;
  node.kind = Node::Kind::kMacro;
  node.pos = current().pos;
  advance();
  node.name = expect(TokenKind::kName, "a macro name").value;
  expect_operator("(");
  while (!at_operator(")")) {
    if (!node.params.empty()) expect_operator(",");
    const Token param = expect(TokenKind::kName, "a parameter name");
    node.params.push_back(param.value);
    if (skip_operator("=")) {
      node.defaults.push_back(parse_expression());
    } else {
      if (std::any_of(node.defaults.begin(), node.defaults.end(), [](const ExprPtr& d) { return d != nullptr; })) {
        fail(param.pos, "non-default argument follows default argument");
      }
      node.defaults.push_back(nullptr);
    }
  }
  expect_operator(")");
  expect_block_end();
  // A macro body is its own function: break and continue cannot reach an enclosing loop.
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  std::string end;
  node.body = parse_body({"endmacro"}, &end, node.pos, "macro");
  loop_depth_ = saved_loop_depth;
  expect_block_end();
  out.push_back(std::move(node));
}

void Parser::parse_filter_block(NodeList& out) {
  Node node;
  node.kind = Node::Kind::kFilterBlock;
  node.pos = current().pos;
  advance();
  node.expr = parse_filters(nullptr, true);
  expect_block_end();
  std::string end;
  node.body = parse_body({"endfilter"}, &end, node.pos, "filter");
  expect_block_end();
  out.push_back(std::move(node));
}

bool Parser::is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
  if (at(TokenKind::kExprEnd) || at(TokenKind::kBlockEnd) || at_operator(")")) return true;
  return at(TokenKind::kName) && one_of(current().value, extra_end);
}

std::string Parser::expect_assignable_name() {
  const Token token = expect(TokenKind::kName, "a name to assign to");
  if (one_of(token.value, {"true", "false", "none", "True", "False", "None"})) {
    fail(token.pos, "cannot assign to '" + token.value + "'");
  }
  return token.value;
}

// A name, a tuple of names (optionally in parentheses) or, for `set`, namespace.attribute.
AssignTarget Parser::parse_assign_target(std::initializer_list<std::string_view> extra_end, bool with_namespace) {
  AssignTarget target;
  target.pos = current().pos;
  if (with_namespace && at(TokenKind::kName) && look().kind == TokenKind::kOperator && look().value == "." &&
      look(2).kind == TokenKind::kName) {
    target.kind = AssignTarget::Kind::kNamespaceAttribute;
    target.names.push_back(current().value);
    advance();
    advance();
    target.attribute = current().value;
    advance();
    return target;
  }
  const bool parenthesized = skip_operator("(");
  bool is_tuple = parenthesized;
  while (true) {
    if (!target.names.empty()) expect_operator(",");
    if (is_tuple_end(extra_end)) break;
    target.names.push_back(expect_assignable_name());
    if (at_operator(",")) is_tuple = true;
    else break;
  }
  if (parenthesized) expect_operator(")");
  if (target.names.empty()) fail_expected("a name to assign to");
  target.kind = is_tuple ? AssignTarget::Kind::kTuple : AssignTarget::Kind::kName;
  return target;
}

}  // namespace detail

Program parse_template(const std::vector<Token>& tokens, const std::string& origin) {
  return detail::Parser(tokens, origin).parse();
}

}  // namespace shardrl::jinja
