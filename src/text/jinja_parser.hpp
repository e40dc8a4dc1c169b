// The syntax tree of a Jinja template and the parser that builds it, following Jinja 3.1's
// grammar and operator precedence (jinja2/parser.py). Anything outside the supported subset is
// refused here, at construction, with an InputError naming origin, line:column and the construct.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_lexer.hpp"
#include "text/jinja_value.hpp"

namespace shardrl::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // operands: items
    kTuple,      // operands: items
    kDict,       // operands: key, value, key, value, ...
    kAttribute,  // operands[0].name
    kItem,       // operands[0][operands[1]]
    kSlice,      // operands[0][operands[1]:operands[2]:operands[3]], absent parts are null
    kCall,       // operands[0](operands[1..], keywords)
    kFilter,     // operands[0] | name(operands[1..], keywords); operands[0] null in {% filter %}
    kTest,       // operands[0] is [not] name(operands[1..], keywords)
    kNot,        // not operands[0]
    kNegate,     // -operands[0]
    kPlus,       // +operands[0]
    kArithmetic, // operands[0] name operands[1], name one of + - * / // % **
    kAnd,
    kOr,
    kConcat,     // operands joined with ~
    kCompare,    // operands[0] ops[0] operands[1] ops[1] ... (chained, as in Python)
    kCondition,  // operands[0] if operands[1] else operands[2] (operands[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  SourcePos pos;
  Value literal;
  std::string name;
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
};

// What `set` and `for` assign to: a name, a tuple of names, or a namespace attribute (ns.attr).
struct AssignTarget {
  enum class Kind { kName, kTuple, kNamespaceAttribute };
  Kind kind = Kind::kName;
  std::vector<std::string> names;
  std::string attribute;
  SourcePos pos;
};

struct Node;
using NodeList = std::vector<Node>;

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body)...; else_body
    kFor,          // for target in expr [if condition]: body; else_body
    kSet,          // set target = expr
    kSetBlock,     // set target [| filter]: body (expr: the filter chain, may be null)
    kMacro,        // macro name(params = defaults): body
    kFilterBlock,  // filter expr: body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  AssignTarget target;
  std::vector<std::pair<ExprPtr, NodeList>> branches;
  NodeList body;
  NodeList else_body;
  std::string name;                 // macro name
  std::vector<std::string> params;  // macro parameters
  std::vector<ExprPtr> defaults;    // per parameter; null where none
};

// A parsed template: immutable, shared by every render.
struct Program {
  NodeList body;
};

Program parse_template(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace shardrl::jinja
