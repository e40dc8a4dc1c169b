// A recursive-descent parser with Jinja 3.1's grammar: condexpr < or < and < not < compare
// (chained) < + - < ~ < * / // % < ** < unary - + < primary with postfix . [] () and | filters and
// `is` tests. Statements: if, for, set, macro, filter, break, continue, print and transformers'
// generation tag; every other statement, filter or test is refused by name.
#include "text/jinja_parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "text/jinja_builtins.hpp"

namespace shardrl::jinja {

namespace {

// Nesting deeper than this is refused rather than risking the stack on a hostile template.
constexpr int kMaxNesting = 200;

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
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

  static ExprPtr make(Expr::Kind kind, SourcePos pos) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->pos = pos;
    return expr;
  }

  // --- statements ---------------------------------------------------------------------------

  // Nodes up to one of the tags `ends` (the closing one first: endfor, else), whose name is stored
  // in *end_found with `{% name` consumed; at top level (no ends) up to the end of the template.
  NodeList parse_body(std::initializer_list<std::string_view> ends, std::string* end_found, SourcePos opener,
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

  void parse_statement(NodeList& out, std::initializer_list<std::string_view> enclosing_ends) {
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

  void parse_for(NodeList& out) {
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

  void parse_if(NodeList& out) {
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

  void parse_set(NodeList& out) {
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

  void parse_macro(NodeList& out) {
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

  void parse_filter_block(NodeList& out) {
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

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (at(TokenKind::kExprEnd) || at(TokenKind::kBlockEnd) || at_operator(")")) return true;
    return at(TokenKind::kName) && one_of(current().value, extra_end);
  }

  std::string expect_assignable_name() {
    const Token token = expect(TokenKind::kName, "a name to assign to");
    if (one_of(token.value, {"true", "false", "none", "True", "False", "None"})) {
      fail(token.pos, "cannot assign to '" + token.value + "'");
    }
    return token.value;
  }

  // A name, a tuple of names (optionally in parentheses) or, for `set`, namespace.attribute.
  AssignTarget parse_assign_target(std::initializer_list<std::string_view> extra_end, bool with_namespace) {
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

  // --- expressions --------------------------------------------------------------------------

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
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

  ExprPtr parse_expression() { return parse_condition(); }

  ExprPtr parse_condition() {
    ExprPtr then_value = parse_or();
    while (at_name("if")) {
      const SourcePos pos = current().pos;
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

  ExprPtr parse_binary_chain(Expr::Kind kind, std::string_view keyword, ExprPtr (Parser::*next)()) {
    ExprPtr left = (this->*next)();
    while (at_name(keyword)) {
      ExprPtr node = make(kind, current().pos);
      advance();
      node->operands.push_back(std::move(left));
      node->operands.push_back((this->*next)());
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_or() { return parse_binary_chain(Expr::Kind::kOr, "or", &Parser::parse_and); }
  ExprPtr parse_and() { return parse_binary_chain(Expr::Kind::kAnd, "and", &Parser::parse_not); }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const NestingGuard guard(*this, current().pos);
      ExprPtr node = make(Expr::Kind::kNot, current().pos);
      advance();
      node->operands.push_back(parse_not());
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_arithmetic(std::initializer_list<std::string_view> ops, ExprPtr (Parser::*next)()) {
    ExprPtr left = (this->*next)();
    while (at(TokenKind::kOperator) && one_of(current().value, ops)) {
      ExprPtr node = make(Expr::Kind::kArithmetic, current().pos);
      node->name = current().value;
      advance();
      node->operands.push_back(std::move(left));
      node->operands.push_back((this->*next)());
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_math1() { return parse_arithmetic({"+", "-"}, &Parser::parse_concat); }

  ExprPtr parse_concat() {
    ExprPtr first = parse_math2();
    if (!at_operator("~")) return first;
    ExprPtr node = make(Expr::Kind::kConcat, current().pos);
    node->operands.push_back(std::move(first));
    while (skip_operator("~")) node->operands.push_back(parse_math2());
    return node;
  }

  ExprPtr parse_math2() { return parse_arithmetic({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_arithmetic({"**"}, &Parser::parse_unary_with_filters); }
  ExprPtr parse_unary_with_filters() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filters) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_list() {
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

  ExprPtr parse_dict() {
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

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_operator(".") || at_operator("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expression(ExprPtr node) {
    while (true) {
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

  ExprPtr parse_subscript(ExprPtr object) {
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

  void parse_call_arguments(Expr& call) {
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

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr node = make(Expr::Kind::kCall, callee->pos);
    node->operands.push_back(std::move(callee));
    parse_call_arguments(*node);
    return node;
  }

  std::string parse_dotted_name(const Token& first) {
    std::string name = first.value;
    while (at_operator(".") && look().kind == TokenKind::kName) {
      advance();
      name += "." + current().value;
      advance();
    }
    return name;
  }

  // `| name(args) | name ...`; with start_inline the first filter has no pipe ({% filter x %}).
  ExprPtr parse_filters(ExprPtr subject, bool start_inline) {
    while (at_operator("|") || start_inline) {
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

  ExprPtr parse_test(ExprPtr subject) {
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

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  std::size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse_template(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse();
}

}  // namespace shardrl::jinja
