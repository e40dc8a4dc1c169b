// The values a Jinja template computes with, modelled on the Python objects Jinja would hold:
// Undefined, None, bool, int, float, str, list, tuple, dict, Namespace, the loop object, generators
// and views, callables; with Python's truthiness, str(), repr(), ==, <, `in`, arithmetic and
// json.dumps(). Containers are shared (a copy of a Value aliases the same list), as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja_text.hpp"

namespace shardrl::jinja {

class Value;

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A list, tuple, generator (what Jinja's map/select/reverse return: single use, no len(), no
// indexing; Python prints its address, so printing one is refused) or view (dict.items() and
// range(): len() and iteration, no indexing, printed as Python prints them).
struct Sequence {
  enum class Kind { kList, kTuple, kGenerator, kView };
  Kind kind = Kind::kList;
  std::vector<Value> items;
  std::size_t consumed = 0;  // generators: items already taken
  std::string python_type;   // generators and views, for messages: "generator", "dict_items", "range"
  std::string repr;          // how a range prints: "range(0, 3)"
};

// A dict (keys are strings, kept in insertion order), a namespace() (the one mutable container)
// or Jinja's loop object (attributes only).
struct Mapping {
  enum class Kind { kDict, kNamespace, kLoop };
  Kind kind = Kind::kDict;
  std::vector<std::pair<std::string, Value>> entries;

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> invoke;
};

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kSequence, kMapping, kCallable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint);  // hint: why, e.g. "'x' is undefined"
  static Value none();
  static Value boolean(bool value);
  static Value integer(std::int64_t value);
  static Value real(double value);
  static Value string(std::string value);
  static Value sequence(Sequence::Kind kind, std::vector<Value> items, std::string python_type = "");
  static Value list(std::vector<Value> items) { return sequence(Sequence::Kind::kList, std::move(items)); }
  static Value tuple(std::vector<Value> items) { return sequence(Sequence::Kind::kTuple, std::move(items)); }
  static Value mapping(Mapping::Kind kind, std::vector<std::pair<std::string, Value>> entries);
  static Value dict(std::vector<std::pair<std::string, Value>> entries) {
    return mapping(Mapping::Kind::kDict, std::move(entries));
  }
  static Value callable(std::string name, std::function<Value(CallArgs&)> invoke);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_string() const { return type_ == Type::kString; }
  // Python numbers: bool is an int.
  bool is_number() const { return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_sequence(Sequence::Kind kind) const { return type_ == Type::kSequence && seq_->kind == kind; }
  // list or tuple: indexable, sliceable, printable.
  bool is_list_or_tuple() const { return is_sequence(Sequence::Kind::kList) || is_sequence(Sequence::Kind::kTuple); }
  bool is_mapping(Mapping::Kind kind) const { return type_ == Type::kMapping && map_->kind == kind; }
  bool is_dict() const { return is_mapping(Mapping::Kind::kDict); }
  bool is_callable() const { return type_ == Type::kCallable; }

  bool as_bool() const { return bool_; }
  std::int64_t as_int() const { return int_; }  // bool and int
  double as_float() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }          // str, or an undefined's hint
  const std::string& undefined_hint() const { return str_; }
  Sequence& as_sequence() const { return *seq_; }
  Mapping& as_mapping() const { return *map_; }
  const Callable& as_callable() const { return *fn_; }

 private:
  Type type_ = Type::kUndefined;
  bool bool_ = false;
  std::int64_t int_ = 0;
  double float_ = 0.0;
  std::string str_;
  std::shared_ptr<Sequence> seq_;
  std::shared_ptr<Mapping> map_;
  std::shared_ptr<const Callable> fn_;
};

// Python's type name, for error messages: "str", "int", "NoneType", "dict", "Undefined", ...
std::string type_name(const Value& value);

// An undefined value used where it cannot be: TemplateError with the undefined's hint.
[[noreturn]] void fail_undefined(const Value& value);

bool truthy(const Value& value);
// str(value): what {{ value }} prints. Undefined prints as "". TemplateError for values Python
// would print as an object address (generators, views, callables, the loop object).
std::string to_str(const Value& value);
std::string to_repr(const Value& value);

bool equals(const Value& a, const Value& b);
// a OP b for OP one of < <= > >=, as Python orders numbers, strings, lists and tuples;
// TemplateError for other types.
bool compare_order(std::string_view op, const Value& a, const Value& b);
// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);

// iter(value) drained into a vector: characters of a str, keys of a dict, what is left of a
// generator (which is then used up). Undefined iterates as empty; TemplateError for None, numbers.
std::vector<Value> iterate(const Value& value);
// len(value); TemplateError where Python has no len() (numbers, generators).
std::int64_t length_of(const Value& value);

// Arithmetic as Python does it on ints (64-bit, overflow is an error), floats, str and lists.
// op is one of + - * / // % **.
Value binary_arithmetic(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& value);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it.
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // None: one line
  std::optional<std::string> item_separator;  // default ", " (or "," with an indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonStyle& style);

// A JSON document as template values: objects become dicts, arrays lists. TemplateError for
// unsigned integers above INT64_MAX.
Value from_json(const nlohmann::ordered_json& json, int depth = 0);

}  // namespace shardrl::jinja
