// The tree-walking evaluator of jinja_parser's syntax tree. Errors raised by value operations
// (TemplateError) are given their place here, at the innermost expression that raised them.
#include "text/jinja_eval.hpp"

#include <algorithm>
#include <deque>

#include "text/jinja_builtins.hpp"

namespace shardrl::jinja {

namespace {

// Macro calls nested deeper than this are refused rather than risking the stack.
constexpr int kMaxCallDepth = 100;
// The same for an expression's tree (eval's recursion).
constexpr int kMaxEvalDepth = 2000;

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> variables;

  const Value* lookup(std::string_view name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent) {
      for (const auto& [key, value] : scope->variables) {
        if (key == name) return &value;
      }
    }
    return nullptr;
  }

  void set(const std::string& name, Value value) {
    for (auto& [key, slot] : variables) {
      if (key == name) {
        slot = std::move(value);
        return;
      }
    }
    variables.emplace_back(name, std::move(value));
  }
};

class Evaluator {
 public:
  explicit Evaluator(const std::string& origin) : origin_(origin) {}

  std::string render(const Program& program, std::vector<std::pair<std::string, Value>> variables) {
    Scope& globals = new_scope(nullptr);
    for (auto& [name, value] : global_functions()) globals.set(name, std::move(value));
    Scope& top = new_scope(&globals);
    for (auto& [name, value] : variables) top.set(name, std::move(value));
    std::string out;
    render_nodes(program.body, &top, out);
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Scope& new_scope(Scope* parent) {
    scopes_.emplace_back();
    scopes_.back().parent = parent;
    return scopes_.back();
  }

  // The scopes made within a loop iteration, a filter probe or a macro call are released when it
  // ends (a render kept every one: two nested loops of 1,000 took 3.4 GB), unless a macro was
  // made meanwhile: its value keeps its defining scope and may outlive the block.
  struct ScopesMadeHere {
    explicit ScopesMadeHere(Evaluator& e) : evaluator(e), scopes(e.scopes_.size()), macros(e.macros_made_) {}
    ~ScopesMadeHere() {
      if (evaluator.macros_made_ != macros) return;
      while (evaluator.scopes_.size() > scopes) evaluator.scopes_.pop_back();
    }
    ScopesMadeHere(const ScopesMadeHere&) = delete;
    ScopesMadeHere& operator=(const ScopesMadeHere&) = delete;
    Evaluator& evaluator;
    std::size_t scopes, macros;
  };

  // Runs `body`, giving a TemplateError it raises the place `pos`.
  template <typename Body>
  auto at(SourcePos pos, Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const TemplateError& error) {
      throw_template_error(origin_, pos, error.what());
    }
  }

  // --- statements ---------------------------------------------------------------------------

  Flow render_nodes(const NodeList& nodes, Scope* scope, std::string& out) {
    for (const Node& node : nodes) {
      const Flow flow = render_node(node, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow render_node(const Node& node, Scope* scope, std::string& out) {
    switch (node.kind) {
      case Node::Kind::kText:
        out += node.text;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value value = eval(*node.expr, scope);
        out += at(node.expr->pos, [&] { return to_str(value); });
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (truthy(eval(*condition, scope))) return render_nodes(body, scope, out);
        }
        return render_nodes(node.else_body, scope, out);
      case Node::Kind::kFor: return render_for(node, scope, out);
      case Node::Kind::kSet: {
        Value value = eval(*node.expr, scope);
        assign(node.target, std::move(value), scope);
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string text;
        const Flow flow = render_nodes(node.body, &new_scope(scope), text);
        if (flow != Flow::kNormal) return flow;
        Value value = Value::string(std::move(text));
        if (node.expr) value = apply_filter_chain(*node.expr, value, scope);
        assign(node.target, std::move(value), scope);
        return Flow::kNormal;
      }
      case Node::Kind::kFilterBlock: {
        std::string text;
        const Flow flow = render_nodes(node.body, &new_scope(scope), text);
        if (flow != Flow::kNormal) return flow;
        const Value value = apply_filter_chain(*node.expr, Value::string(std::move(text)), scope);
        out += at(node.pos, [&] { return to_str(value); });
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        scope->set(node.name, make_macro(node, scope));
        return Flow::kNormal;
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow render_for(const Node& node, Scope* scope, std::string& out) {
    const Value iterable = eval(*node.expr, scope);
    std::vector<Value> items = at(node.expr->pos, [&] { return iterate(iterable); });
    if (node.condition) {
      // `for x in xs if cond`: the loop (and its loop.length) sees only the items that pass.
      std::vector<Value> kept;
      for (Value& item : items) {
        const ScopesMadeHere released(*this);
        Scope& probe = new_scope(scope);
        assign(node.target, item, &probe);
        if (truthy(eval(*node.condition, &probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    // Jinja renders the else block unless an iteration reached the end of the body: a loop that
    // is empty, or whose iterations all ended in break or continue, takes the else branch.
    bool completed_an_iteration = false;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const ScopesMadeHere released(*this);
      Scope& iteration = new_scope(scope);
      iteration.set("loop", loop_object(items, i));
      assign(node.target, items[i], &iteration);
      const Flow flow = render_nodes(node.body, &iteration, out);
      if (flow == Flow::kBreak) break;
      if (flow == Flow::kNormal) completed_an_iteration = true;
    }
    if (!completed_an_iteration) return render_nodes(node.else_body, &new_scope(scope), out);
    return Flow::kNormal;
  }

  static Value loop_object(const std::vector<Value>& items, std::size_t i) {
    const auto n = static_cast<std::int64_t>(items.size());
    const auto index = static_cast<std::int64_t>(i);
    std::vector<std::pair<std::string, Value>> entries = {
        {"index", Value::integer(index + 1)},
        {"index0", Value::integer(index)},
        {"revindex", Value::integer(n - index)},
        {"revindex0", Value::integer(n - index - 1)},
        {"first", Value::boolean(i == 0)},
        {"last", Value::boolean(index == n - 1)},
        {"length", Value::integer(n)},
        {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {"nextitem", index + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
    };
    entries.emplace_back("cycle", Value::callable("loop.cycle", [index](CallArgs& args) {
      if (!args.keyword.empty()) throw TemplateError("loop.cycle() takes no keyword arguments");
      if (args.positional.empty()) throw TemplateError("no items for cycling given");
      return args.positional[static_cast<std::size_t>(index) % args.positional.size()];
    }));
    return Value::mapping(Mapping::Kind::kLoop, std::move(entries));
  }

  void assign(const AssignTarget& target, Value value, Scope* scope) {
    at(target.pos, [&] {
      switch (target.kind) {
        case AssignTarget::Kind::kName:
          scope->set(target.names[0], std::move(value));
          return;
        case AssignTarget::Kind::kTuple: {
          if (value.type() != Value::Type::kString && value.type() != Value::Type::kSequence && !value.is_dict()) {
            throw TemplateError("cannot unpack non-iterable " + type_name(value) + " object");
          }
          std::vector<Value> items = iterate(value);
          const std::size_t expected = target.names.size();
          if (items.size() > expected) {
            throw TemplateError("too many values to unpack (expected " + std::to_string(expected) + ")");
          }
          if (items.size() < expected) {
            throw TemplateError("not enough values to unpack (expected " + std::to_string(expected) + ", got " +
                                std::to_string(items.size()) + ")");
          }
          for (std::size_t i = 0; i < expected; ++i) scope->set(target.names[i], std::move(items[i]));
          return;
        }
        case AssignTarget::Kind::kNamespaceAttribute: {
          const Value* ns = scope->lookup(target.names[0]);
          if (ns == nullptr || !ns->is_mapping(Mapping::Kind::kNamespace)) {
            throw TemplateError("cannot assign attribute on non-namespace object");
          }
          ns->as_mapping().set(target.attribute, std::move(value));
          return;
        }
      }
    });
  }

  Value make_macro(const Node& node, Scope* defined_in) {
    ++macros_made_;
    const Node* macro = &node;
    return Value::callable(node.name, [this, macro, defined_in](CallArgs& args) {
      if (call_depth_ >= kMaxCallDepth) throw TemplateError("macro calls nest deeper than 100 levels");
      const std::string& name = macro->name;
      if (args.positional.size() > macro->params.size()) {
        throw TemplateError("macro '" + name + "' takes not more than " + std::to_string(macro->params.size()) +
                            " argument(s)");
      }
      for (const auto& [key, value] : args.keyword) {
        const auto& params = macro->params;
        const auto it = std::find(params.begin(), params.end(), key);
        if (it == params.end()) throw TemplateError("macro '" + name + "' takes no keyword argument '" + key + "'");
        if (static_cast<std::size_t>(it - params.begin()) < args.positional.size()) {
          throw TemplateError("macro '" + name + "' got multiple values for argument '" + key + "'");
        }
      }
      const ScopesMadeHere released(*this);
      Scope& scope = new_scope(defined_in);
      for (std::size_t i = 0; i < macro->params.size(); ++i) {
        const std::string& param = macro->params[i];
        Value value = Value::undefined("parameter '" + param + "' was not provided");
        const auto keyword = std::find_if(args.keyword.begin(), args.keyword.end(),
                                          [&](const auto& kw) { return kw.first == param; });
        if (i < args.positional.size()) value = args.positional[i];
        else if (keyword != args.keyword.end()) value = keyword->second;
        else if (macro->defaults[i]) value = eval(*macro->defaults[i], &scope);
        scope.set(param, std::move(value));
      }
      ++call_depth_;
      struct DepthRestore {
        int& depth;
        ~DepthRestore() { --depth; }
      } restore{call_depth_};
      std::string out;
      render_nodes(macro->body, &scope, out);
      return Value::string(std::move(out));
    });
  }

  // A filter chain of {% set x | f %} or {% filter f %}, whose innermost subject is `input`.
  Value apply_filter_chain(const Expr& chain, const Value& input, Scope* scope) {
    const Value* saved = block_input_;
    block_input_ = &input;
    Value result = eval(chain, scope);
    block_input_ = saved;
    return result;
  }

  // --- expressions --------------------------------------------------------------------------

  Value eval(const Expr& expr, Scope* scope) {
    // Each level of an expression tree is a frame here. The parser bounds its own recursion and
    // each chain, but chains nested in parentheses still build trees thousands deep: bounded here,
    // where the stack is spent.
    if (eval_depth_ >= kMaxEvalDepth)
      throw_template_error(origin_, expr.pos, "expression nests too deeply (more than 2000 levels)");
    ++eval_depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{eval_depth_};
    try {
      return eval_unplaced(expr, scope);
    } catch (const TemplateError& error) {
      throw_template_error(origin_, expr.pos, error.what());
    }
  }

  CallArgs eval_arguments(const Expr& expr, std::size_t first, Scope* scope) {
    CallArgs args;
    for (std::size_t i = first; i < expr.operands.size(); ++i) args.positional.push_back(eval(*expr.operands[i], scope));
    for (const auto& [key, value] : expr.keywords) args.keyword.emplace_back(key, eval(*value, scope));
    return args;
  }

  bool compare(const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return equals(left, right);
    if (op == "!=") return !equals(left, right);
    if (op == "in") return contains(right, left);
    if (op == "not in") return !contains(right, left);
    return compare_order(op, left, right);
  }

  Value eval_unplaced(const Expr& expr, Scope* scope) {
    const auto& ops = expr.operands;
    switch (expr.kind) {
      case Expr::Kind::kLiteral: return expr.literal;
      case Expr::Kind::kName: {
        const Value* value = scope->lookup(expr.name);
        return value != nullptr ? *value : Value::undefined("'" + expr.name + "' is undefined");
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        items.reserve(ops.size());
        for (const auto& op : ops) items.push_back(eval(*op, scope));
        return expr.kind == Expr::Kind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        Value dict = Value::dict({});
        for (std::size_t i = 0; i + 1 < ops.size(); i += 2) {
          const Value key = eval(*ops[i], scope);
          if (!key.is_string()) throw TemplateError("dict keys must be strings here, not " + type_name(key));
          dict.as_mapping().set(key.as_string(), eval(*ops[i + 1], scope));
        }
        return dict;
      }
      case Expr::Kind::kAttribute: return get_attribute(eval(*ops[0], scope), expr.name);
      case Expr::Kind::kItem: {
        const Value object = eval(*ops[0], scope);
        return get_item(object, eval(*ops[1], scope));
      }
      case Expr::Kind::kSlice: {
        const Value object = eval(*ops[0], scope);
        Value parts[3];
        for (int i = 0; i < 3; ++i) parts[i] = ops[static_cast<std::size_t>(i) + 1] ? eval(*ops[static_cast<std::size_t>(i) + 1], scope) : Value::none();
        return get_slice(object, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*ops[0], scope);
        CallArgs args = eval_arguments(expr, 1, scope);
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) throw TemplateError("'" + type_name(callee) + "' object is not callable");
        return callee.as_callable().invoke(args);
      }
      case Expr::Kind::kFilter: {
        const Value subject = ops[0] ? eval(*ops[0], scope) : *block_input_;
        CallArgs args = eval_arguments(expr, 1, scope);
        return apply_filter(expr.name, subject, args);
      }
      case Expr::Kind::kTest: {
        const Value subject = eval(*ops[0], scope);
        CallArgs args = eval_arguments(expr, 1, scope);
        return Value::boolean(apply_test(expr.name, subject, args) != expr.negated);
      }
      case Expr::Kind::kNot: return Value::boolean(!truthy(eval(*ops[0], scope)));
      case Expr::Kind::kNegate: return negate(eval(*ops[0], scope));
      case Expr::Kind::kPlus: {
        const Value value = eval(*ops[0], scope);
        if (value.is_undefined()) fail_undefined(value);
        if (value.is_float()) return value;
        if (value.is_int() || value.is_bool()) return Value::integer(value.as_int());
        throw TemplateError("bad operand type for unary +: '" + type_name(value) + "'");
      }
      case Expr::Kind::kArithmetic: {
        const Value left = eval(*ops[0], scope);
        const Value right = eval(*ops[1], scope);
        return binary_arithmetic(expr.name, left, right);
      }
      case Expr::Kind::kAnd: {
        Value left = eval(*ops[0], scope);
        return truthy(left) ? eval(*ops[1], scope) : left;
      }
      case Expr::Kind::kOr: {
        Value left = eval(*ops[0], scope);
        return truthy(left) ? left : eval(*ops[1], scope);
      }
      case Expr::Kind::kConcat: {
        std::string text;
        for (const auto& op : ops) text += to_str(eval(*op, scope));
        return Value::string(std::move(text));
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*ops[0], scope);
        for (std::size_t i = 0; i < expr.ops.size(); ++i) {
          Value right = eval(*ops[i + 1], scope);
          if (!compare(expr.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCondition:
        if (truthy(eval(*ops[1], scope))) return eval(*ops[0], scope);
        if (ops[2]) return eval(*ops[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(expr.pos.line) +
                                " evaluated to false and no else section was defined.");
    }
    return Value();
  }

  const std::string& origin_;
  std::deque<Scope> scopes_;  // every scope of one render; deque keeps their addresses stable
  const Value* block_input_ = nullptr;
  int call_depth_ = 0;
  std::size_t macros_made_ = 0;   // macros made so far (ScopesMadeHere)
  int eval_depth_ = 0;
};

}  // namespace

std::string render_program(const Program& program, const std::string& origin,
                           std::vector<std::pair<std::string, Value>> variables) {
  return Evaluator(origin).render(program, std::move(variables));
}

}  // namespace shardrl::jinja
