// The expressions of a Jinja template (the grammar's precedence: jinja_parser.cpp), as the
// recursive-descent parser's methods (jinja_recursive_parser.hpp), each level one method.
#include "text/jinja_builtins.hpp"
#include "text/jinja_recursive_parser.hpp"

namespace shardrl::jinja::detail {

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                          bool explicit_parentheses) {
  const SourcePos pos = current().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_operator(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(simplified ? parse_primary() : with_condexpr ? parse_expression() : parse_or());
    if (at_operator(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parentheses) fail_expected("an expression");
  }
  ExprPtr tuple = make(Expr::Kind::kTuple, pos);
  tuple->operands = std::move(items);
  return tuple;
}

ExprPtr Parser::parse_condition() {
  ExprPtr then_value = parse_or();
  ChainGuard chain(*this);
  while (at_name("if")) {
    const SourcePos pos = current().pos;
    chain.step(pos);
    advance();
    ExprPtr condition = parse_or();
    ExprPtr else_value = skip_name("else") ? parse_condition() : nullptr;
    ExprPtr node = make(Expr::Kind::kCondition, pos);
    node->operands.push_back(std::move(then_value));
    node->operands.push_back(std::move(condition));
    node->operands.push_back(std::move(else_value));
    then_value = std::move(node);
  }
  return then_value;
}

ExprPtr Parser::parse_binary_chain(Expr::Kind kind, std::string_view keyword, ExprPtr (Parser::*next)()) {
  ExprPtr left = (this->*next)();
  ChainGuard chain(*this);
  while (at_name(keyword)) {
    chain.step(current().pos);
    ExprPtr node = make(kind, current().pos);
    advance();
    node->operands.push_back(std::move(left));
    node->operands.push_back((this->*next)());
    left = std::move(node);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (at_name("not")) {
    const NestingGuard guard(*this, current().pos);
    ExprPtr node = make(Expr::Kind::kNot, current().pos);
    advance();
    node->operands.push_back(parse_not());
    return node;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const SourcePos pos = current().pos;
  ExprPtr first = parse_math1();
  ExprPtr node;
  while (true) {
    std::string op;
    if (at(TokenKind::kOperator) && one_of(current().value, {"==", "!=", "<", "<=", ">", ">="})) {
      op = current().value;
      advance();
    } else if (at_name("in")) {
      op = "in";
      advance();
    } else if (at_name("not") && look().kind == TokenKind::kName && look().value == "in") {
      op = "not in";
      advance();
      advance();
    } else {
      break;
    }
    if (!node) {
      node = make(Expr::Kind::kCompare, pos);
      node->operands.push_back(std::move(first));
    }
    node->ops.push_back(op);
    node->operands.push_back(parse_math1());
  }
  return node ? std::move(node) : std::move(first);
}

ExprPtr Parser::parse_arithmetic(std::initializer_list<std::string_view> ops, ExprPtr (Parser::*next)()) {
  ExprPtr left = (this->*next)();
  ChainGuard chain(*this);
  while (at(TokenKind::kOperator) && one_of(current().value, ops)) {
    chain.step(current().pos);
    ExprPtr node = make(Expr::Kind::kArithmetic, current().pos);
    node->name = current().value;
    advance();
    node->operands.push_back(std::move(left));
    node->operands.push_back((this->*next)());
    left = std::move(node);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr first = parse_math2();
  if (!at_operator("~")) return first;
  ExprPtr node = make(Expr::Kind::kConcat, current().pos);
  node->operands.push_back(std::move(first));
  while (skip_operator("~")) node->operands.push_back(parse_math2());
  return node;
}

ExprPtr Parser::parse_unary(bool with_filters) {
  const NestingGuard guard(*this, current().pos);
  ExprPtr node;
  if (at_operator("-") || at_operator("+")) {
    node = make(at_operator("-") ? Expr::Kind::kNegate : Expr::Kind::kPlus, current().pos);
    advance();
    node->operands.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filters) node = parse_filter_expression(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token token = current();
  switch (token.kind) {
    case TokenKind::kName: {
      advance();
      ExprPtr node = make(Expr::Kind::kLiteral, token.pos);
      if (one_of(token.value, {"true", "True"})) node->literal = Value::boolean(true);
      else if (one_of(token.value, {"false", "False"})) node->literal = Value::boolean(false);
      else if (one_of(token.value, {"none", "None"})) node->literal = Value::none();
      else {
        node->kind = Expr::Kind::kName;
        node->name = token.value;
      }
      return node;
    }
    case TokenKind::kString: {
      std::string text;
      while (at(TokenKind::kString)) {  // adjacent literals concatenate, as in Python
        text += current().value;
        advance();
      }
      ExprPtr node = make(Expr::Kind::kLiteral, token.pos);
      node->literal = Value::string(std::move(text));
      return node;
    }
    case TokenKind::kInteger:
    case TokenKind::kFloat: {
      advance();
      ExprPtr node = make(Expr::Kind::kLiteral, token.pos);
      node->literal = token.kind == TokenKind::kInteger ? Value::integer(token.integer) : Value::real(token.real);
      return node;
    }
    case TokenKind::kOperator:
      if (token.value == "(") {
        advance();
        ExprPtr node = parse_tuple(false, true, {}, true);
        expect_operator(")");
        return node;
      }
      if (token.value == "[") return parse_list();
      if (token.value == "{") return parse_dict();
      break;
    default: break;
  }
  fail(token.pos, "unexpected " + describe_token(token) + " in an expression");
}

ExprPtr Parser::parse_list() {
  ExprPtr node = make(Expr::Kind::kList, current().pos);
  expect_operator("[");
  while (!at_operator("]")) {
    if (!node->operands.empty()) expect_operator(",");
    if (at_operator("]")) break;
    node->operands.push_back(parse_expression());
  }
  expect_operator("]");
  return node;
}

ExprPtr Parser::parse_dict() {
  ExprPtr node = make(Expr::Kind::kDict, current().pos);
  expect_operator("{");
  while (!at_operator("}")) {
    if (!node->operands.empty()) expect_operator(",");
    if (at_operator("}")) break;
    node->operands.push_back(parse_expression());
    expect_operator(":");
    node->operands.push_back(parse_expression());
  }
  expect_operator("}");
  return node;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  ChainGuard chain(*this);
  while (true) {
    if (at_operator(".") || at_operator("[") || at_operator("(")) chain.step(current().pos);
    if (at_operator(".") || at_operator("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_operator("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expression(ExprPtr node) {
  ChainGuard chain(*this);
  while (true) {
    if (at_operator("|") || at_name("is") || at_operator("(")) chain.step(current().pos);
    if (at_operator("|")) {
      node = parse_filters(std::move(node), false);
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_operator("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr object) {
  const Token token = current();
  advance();
  if (token.value == ".") {
    const Token attribute = current();
    if (attribute.kind == TokenKind::kName) {
      advance();
      ExprPtr node = make(Expr::Kind::kAttribute, token.pos);
      node->name = attribute.value;
      node->operands.push_back(std::move(object));
      return node;
    }
    if (attribute.kind != TokenKind::kInteger) fail_expected("a name or number after '.'");
    advance();
    ExprPtr key = make(Expr::Kind::kLiteral, attribute.pos);
    key->literal = Value::integer(attribute.integer);
    ExprPtr node = make(Expr::Kind::kItem, token.pos);
    node->operands.push_back(std::move(object));
    node->operands.push_back(std::move(key));
    return node;
  }
  // "[": an index or a slice. Jinja would also take x[a, b] (a tuple key), which no template needs.
  ExprPtr parts[3];
  bool is_slice = false;
  if (!at_operator(":")) {
    parts[0] = parse_expression();
  }
  if (skip_operator(":")) {
    is_slice = true;
    if (!at_operator(":") && !at_operator("]")) parts[1] = parse_expression();
    if (skip_operator(":")) {
      if (!at_operator("]")) parts[2] = parse_expression();
    }
  }
  if (at_operator(",")) fail(current().pos, "unsupported subscript with several indices (x[a, b])");
  expect_operator("]");
  ExprPtr node = make(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, token.pos);
  node->operands.push_back(std::move(object));
  if (is_slice) {
    for (auto& part : parts) node->operands.push_back(std::move(part));
  } else {
    if (!parts[0]) fail(token.pos, "empty subscript");
    node->operands.push_back(std::move(parts[0]));
  }
  return node;
}

void Parser::parse_call_arguments(Expr& call) {
  expect_operator("(");
  bool require_comma = false;
  while (!at_operator(")")) {
    if (require_comma) {
      expect_operator(",");
      if (at_operator(")")) break;  // trailing comma
    }
    if (at_operator("*") || at_operator("**")) fail(current().pos, "unsupported argument unpacking (*args, **kwargs)");
    if (at(TokenKind::kName) && look().kind == TokenKind::kOperator && look().value == "=") {
      std::string key = current().value;
      advance();
      advance();
      call.keywords.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.keywords.empty()) fail(current().pos, "positional argument follows keyword argument");
      call.operands.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_operator(")");
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  ExprPtr node = make(Expr::Kind::kCall, callee->pos);
  node->operands.push_back(std::move(callee));
  parse_call_arguments(*node);
  return node;
}

std::string Parser::parse_dotted_name(const Token& first) {
  std::string name = first.value;
  while (at_operator(".") && look().kind == TokenKind::kName) {
    advance();
    name += "." + current().value;
    advance();
  }
  return name;
}

// `| name(args) | name ...`; with start_inline the first filter has no pipe ({% filter x %}).
ExprPtr Parser::parse_filters(ExprPtr subject, bool start_inline) {
  ChainGuard chain(*this);
  while (at_operator("|") || start_inline) {
    chain.step(current().pos);
    if (!start_inline) advance();
    start_inline = false;
    const Token token = expect(TokenKind::kName, "a filter name");
    const std::string name = parse_dotted_name(token);
    if (!is_supported_filter(name)) fail(token.pos, "unsupported filter '" + name + "'");
    ExprPtr node = make(Expr::Kind::kFilter, token.pos);
    node->name = name;
    node->operands.push_back(std::move(subject));
    if (at_operator("(")) parse_call_arguments(*node);
    subject = std::move(node);
  }
  return subject;
}

ExprPtr Parser::parse_test(ExprPtr subject) {
  advance();  // is
  const bool negated = skip_name("not");
  const Token token = expect(TokenKind::kName, "a test name");
  const std::string name = parse_dotted_name(token);
  if (!is_supported_test(name)) fail(token.pos, "unsupported test '" + name + "'");
  ExprPtr node = make(Expr::Kind::kTest, token.pos);
  node->name = name;
  node->negated = negated;
  node->operands.push_back(std::move(subject));
  if (at_operator("(")) {
    parse_call_arguments(*node);
  } else if ((at(TokenKind::kName) || at(TokenKind::kString) || at(TokenKind::kInteger) || at(TokenKind::kFloat) ||
              at_operator("[") || at_operator("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and")) {
    // Jinja's one-argument form: `x is divisibleby 3`, `x is sameas none`.
    if (at_name("is")) fail(current().pos, "cannot chain tests with 'is'");
    node->operands.push_back(parse_postfix(parse_primary()));
  }
  return node;
}

}  // namespace shardrl::jinja::detail
