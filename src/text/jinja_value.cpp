// Template values with Python's semantics (see jinja_value.hpp). Where Python would raise, this
// raises TemplateError with Python's wording, so a template error reads the same as in transformers.
#include "text/jinja_value.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardrl::jinja {

namespace {

// Strings built by `*` are capped: a template cannot ask for gigabytes by accident.
constexpr std::size_t kMaxRepeatedBytes = std::size_t{64} << 20;

bool is_int_like(const Value& v) { return v.is_int() || v.is_bool(); }

// Python's hash(): lists and dicts have none, a tuple has one if its items do.
bool is_hashable(const Value& v) {
  if (v.is_sequence(Sequence::Kind::kList) || v.is_dict()) return false;
  if (v.is_sequence(Sequence::Kind::kTuple)) {
    const auto& items = v.as_sequence().items;
    return std::all_of(items.begin(), items.end(), [](const Value& item) { return is_hashable(item); });
  }
  return true;
}

[[noreturn]] void fail_operands(std::string_view op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

// Python compares int and float exactly; long double holds every int64 exactly on x86-64.
long double exact(const Value& v) {
  return v.is_float() ? static_cast<long double>(v.as_float()) : static_cast<long double>(v.as_int());
}

Value repeat(const Value& seq, std::int64_t times) {
  if (seq.is_string()) {
    if (times <= 0) return Value::string("");
    const std::string& text = seq.as_string();
    if (!text.empty() && static_cast<std::size_t>(times) > kMaxRepeatedBytes / text.size()) {
      throw TemplateError("string repetition would exceed 64 MiB");
    }
    std::string out;
    out.reserve(text.size() * static_cast<std::size_t>(times));
    for (std::int64_t i = 0; i < times; ++i) out += text;
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  const auto& source = seq.as_sequence().items;
  if (times > 0 && !source.empty() && static_cast<std::size_t>(times) > kMaxRepeatedBytes / source.size()) {
    throw TemplateError("list repetition would exceed 64 Mi items");
  }
  for (std::int64_t i = 0; i < times; ++i) items.insert(items.end(), source.begin(), source.end());
  return Value::sequence(seq.as_sequence().kind, std::move(items));
}

Value int_arithmetic(std::string_view op, std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  auto overflow = [&]() -> Value { throw TemplateError("integer overflow in '" + std::string(op) + "' (integers are 64-bit here)"); };
  if (op == "+") return __builtin_add_overflow(a, b, &r) ? overflow() : Value::integer(r);
  if (op == "-") return __builtin_sub_overflow(a, b, &r) ? overflow() : Value::integer(r);
  if (op == "*") return __builtin_mul_overflow(a, b, &r) ? overflow() : Value::integer(r);
  if (op == "/") {
    if (b == 0) throw TemplateError("division by zero");
    return Value::real(static_cast<double>(a) / static_cast<double>(b));
  }
  if (op == "//" || op == "%") {
    if (b == 0) throw TemplateError("integer division or modulo by zero");
    if (a == std::numeric_limits<std::int64_t>::min() && b == -1) return overflow();
    std::int64_t quotient = a / b;
    std::int64_t remainder = a % b;
    if (remainder != 0 && ((remainder < 0) != (b < 0))) {  // Python floors toward -inf
      quotient -= 1;
      remainder += b;
    }
    return Value::integer(op == "//" ? quotient : remainder);
  }
  // "**"
  if (b < 0) {
    if (a == 0) throw TemplateError("0.0 cannot be raised to a negative power");
    return Value::real(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
  std::int64_t result = 1;
  std::int64_t base = a;
  std::int64_t exponent = b;
  while (exponent > 0) {
    if (exponent & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return overflow();
    }
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
  }
  return Value::integer(result);
}

Value float_arithmetic(std::string_view op, double a, double b) {
  if (op == "+") return Value::real(a + b);
  if (op == "-") return Value::real(a - b);
  if (op == "*") return Value::real(a * b);
  if (op == "/") {
    if (b == 0.0) throw TemplateError("float division by zero");
    return Value::real(a / b);
  }
  if (op == "//" || op == "%") {
    if (b == 0.0) throw TemplateError(op == "//" ? "float floor division by zero" : "float modulo");
    // CPython's float_divmod.
    double mod = std::fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0) {
      if ((b < 0) != (mod < 0)) {
        mod += b;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, b);
    }
    double floordiv = 0.0;
    if (div != 0.0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, a / b);
    }
    return Value::real(op == "//" ? floordiv : mod);
  }
  // "**"
  if (a == 0.0 && b < 0) throw TemplateError("0.0 cannot be raised to a negative power");
  if (a < 0 && b != std::floor(b)) throw TemplateError("a negative number to a fractional power is complex");
  const double result = std::pow(a, b);
  if (std::isinf(result) && std::isfinite(a) && std::isfinite(b)) throw TemplateError("float overflow in '**'");
  return Value::real(result);
}

void json_into(const Value& value, const JsonStyle& style, int depth, std::string& out) {
  const std::string item_sep = style.item_separator ? *style.item_separator : style.indent ? "," : ", ";
  const std::string key_sep = style.key_separator ? *style.key_separator : ": ";
  auto newline = [&](int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *style.indent;
  };
  switch (value.type()) {
    case Value::Type::kNone: out += "null"; return;
    case Value::Type::kBool: out += value.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: out += std::to_string(value.as_int()); return;
    case Value::Type::kFloat: {
      const double f = value.as_float();
      if (std::isnan(f)) out += "NaN";
      else if (std::isinf(f)) out += f < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(f);
      return;
    }
    case Value::Type::kString: out += json_quote_string(value.as_string(), style.ensure_ascii); return;
    case Value::Type::kSequence: {
      if (!value.is_list_or_tuple()) break;
      const auto& items = value.as_sequence().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (style.indent) newline(depth + 1);
        json_into(items[i], style, depth + 1, out);
      }
      if (style.indent) newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Type::kMapping: {
      if (!value.is_dict()) break;
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.as_mapping().entries) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (style.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* x, const auto* y) { return x->first < y->first; });
      }
      out.push_back('{');
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_sep;
        if (style.indent) newline(depth + 1);
        out += json_quote_string(entries[i]->first, style.ensure_ascii);
        out += key_sep;
        json_into(entries[i]->second, style, depth + 1, out);
      }
      if (style.indent) newline(depth);
      out.push_back('}');
      return;
    }
    default: break;
  }
  throw TemplateError("Object of type " + type_name(value) + " is not JSON serializable");
}

}  // namespace

const Value* Mapping::find(std::string_view key) const {
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void Mapping::set(std::string key, Value value) {
  for (auto& entry : entries) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::boolean(bool value) {
  Value v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  v.int_ = value ? 1 : 0;
  return v;
}

Value Value::integer(std::int64_t value) {
  Value v;
  v.type_ = Type::kInt;
  v.int_ = value;
  return v;
}

Value Value::real(double value) {
  Value v;
  v.type_ = Type::kFloat;
  v.float_ = value;
  return v;
}

Value Value::string(std::string value) {
  Value v;
  v.type_ = Type::kString;
  v.str_ = std::move(value);
  return v;
}

Value Value::sequence(Sequence::Kind kind, std::vector<Value> items, std::string python_type) {
  Value v;
  v.type_ = Type::kSequence;
  v.seq_ = std::make_shared<Sequence>();
  v.seq_->kind = kind;
  v.seq_->items = std::move(items);
  v.seq_->python_type = std::move(python_type);
  return v;
}

Value Value::mapping(Mapping::Kind kind, std::vector<std::pair<std::string, Value>> entries) {
  Value v;
  v.type_ = Type::kMapping;
  v.map_ = std::make_shared<Mapping>();
  v.map_->kind = kind;
  v.map_->entries = std::move(entries);
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> invoke) {
  Value v;
  v.type_ = Type::kCallable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(invoke)});
  return v;
}

std::string type_name(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kNone: return "NoneType";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kFloat: return "float";
    case Value::Type::kString: return "str";
    case Value::Type::kSequence:
      switch (value.as_sequence().kind) {
        case Sequence::Kind::kList: return "list";
        case Sequence::Kind::kTuple: return "tuple";
        default: return value.as_sequence().python_type;
      }
    case Value::Type::kMapping:
      switch (value.as_mapping().kind) {
        case Mapping::Kind::kDict: return "dict";
        case Mapping::Kind::kNamespace: return "Namespace";
        case Mapping::Kind::kLoop: return "LoopContext";
      }
      break;
    case Value::Type::kCallable: return "function";
  }
  return "object";
}

void fail_undefined(const Value& value) { throw TemplateError(value.undefined_hint()); }

bool truthy(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return false;
    case Value::Type::kBool: return value.as_bool();
    case Value::Type::kInt: return value.as_int() != 0;
    case Value::Type::kFloat: return value.as_float() != 0.0;
    case Value::Type::kString: return !value.as_string().empty();
    case Value::Type::kSequence:
      // A generator object is always true in Python, however many items it would yield.
      return value.is_sequence(Sequence::Kind::kGenerator) || !value.as_sequence().items.empty();
    case Value::Type::kMapping: return !value.is_dict() || !value.as_mapping().entries.empty();
    case Value::Type::kCallable: return true;
  }
  return false;
}

std::string to_str(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined: return "";
    case Value::Type::kString: return value.as_string();
    default: return to_repr(value);
  }
}

std::string to_repr(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kNone: return "None";
    case Value::Type::kBool: return value.as_bool() ? "True" : "False";
    case Value::Type::kInt: return std::to_string(value.as_int());
    case Value::Type::kFloat: return python_float_repr(value.as_float());
    case Value::Type::kString: return python_repr_string(value.as_string());
    case Value::Type::kSequence: {
      if (value.is_sequence(Sequence::Kind::kView)) {
        const Sequence& view = value.as_sequence();
        if (!view.repr.empty()) return view.repr;
        return view.python_type + "(" + to_repr(Value::list(view.items)) + ")";  // dict_items([...])
      }
      if (!value.is_list_or_tuple()) break;
      const bool tuple = value.is_sequence(Sequence::Kind::kTuple);
      const auto& items = value.as_sequence().items;
      std::string out = tuple ? "(" : "[";
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += to_repr(items[i]);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Type::kMapping: {
      if (value.is_mapping(Mapping::Kind::kLoop)) break;
      std::string out = value.is_dict() ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [key, item] : value.as_mapping().entries) {
        if (!first) out += ", ";
        first = false;
        out += python_repr_string(key) + ": " + to_repr(item);
      }
      out += value.is_dict() ? "}" : "}>";
      return out;
    }
    default: break;
  }
  throw TemplateError("cannot print a " + type_name(value) +
                      " object (Python would print its address); convert it first, e.g. with |list");
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return exact(a) == exact(b);
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return true;
    case Value::Type::kString: return a.as_string() == b.as_string();
    case Value::Type::kSequence: {
      if (&a.as_sequence() == &b.as_sequence()) return true;
      if (!a.is_list_or_tuple() || a.as_sequence().kind != b.as_sequence().kind) return false;
      const auto& x = a.as_sequence().items;
      const auto& y = b.as_sequence().items;
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Type::kMapping: {
      if (&a.as_mapping() == &b.as_mapping()) return true;
      if (!a.is_dict() || !b.is_dict()) return false;
      const auto& x = a.as_mapping().entries;
      if (x.size() != b.as_mapping().entries.size()) return false;
      for (const auto& [key, item] : x) {
        const Value* other = b.as_mapping().find(key);
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    }
    case Value::Type::kCallable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

bool compare_order(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto by_three_way = [&](int c) {
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  };
  if (a.is_number() && b.is_number()) {
    const long double x = exact(a);
    const long double y = exact(b);
    if (op == "<") return x < y;
    if (op == "<=") return x <= y;
    if (op == ">") return x > y;
    return x >= y;
  }
  if (a.is_string() && b.is_string()) return by_three_way(a.as_string().compare(b.as_string()));
  if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.as_sequence().kind == b.as_sequence().kind) {
    const auto& x = a.as_sequence().items;
    const auto& y = b.as_sequence().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare_order(op, x[i], y[i]);
    }
    return by_three_way(x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0);
  }
  throw TemplateError("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.type()) {
    case Value::Type::kUndefined: return false;
    case Value::Type::kString:
      if (!needle.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " + type_name(needle));
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Type::kSequence: {
      Sequence& seq = haystack.as_sequence();
      if (seq.kind == Sequence::Kind::kGenerator) {  // consumes up to the match, as Python does
        while (seq.consumed < seq.items.size()) {
          if (equals(seq.items[seq.consumed++], needle)) return true;
        }
        return false;
      }
      return std::any_of(seq.items.begin(), seq.items.end(), [&](const Value& item) { return equals(item, needle); });
    }
    case Value::Type::kMapping:
      if (haystack.is_dict()) {
        if (!is_hashable(needle)) throw TemplateError("unhashable type: '" + type_name(needle) + "'");
        return needle.is_string() && haystack.as_mapping().find(needle.as_string()) != nullptr;
      }
      break;
    default: break;
  }
  throw TemplateError("argument of type '" + type_name(haystack) + "' is not iterable");
}

std::vector<Value> iterate(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined: return {};
    case Value::Type::kString: {
      std::vector<Value> chars;
      for (char32_t cp : decode_utf8(value.as_string())) {
        std::string one;
        append_utf8(one, cp);
        chars.push_back(Value::string(std::move(one)));
      }
      return chars;
    }
    case Value::Type::kSequence: {
      Sequence& seq = value.as_sequence();
      if (seq.kind != Sequence::Kind::kGenerator) return seq.items;
      std::vector<Value> rest(seq.items.begin() + static_cast<std::ptrdiff_t>(seq.consumed), seq.items.end());
      seq.consumed = seq.items.size();
      return rest;
    }
    case Value::Type::kMapping:
      if (value.is_dict()) {
        std::vector<Value> keys;
        for (const auto& entry : value.as_mapping().entries) keys.push_back(Value::string(entry.first));
        return keys;
      }
      break;
    default: break;
  }
  throw TemplateError("'" + type_name(value) + "' object is not iterable");
}

std::int64_t length_of(const Value& value) {
  switch (value.type()) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return static_cast<std::int64_t>(count_code_points(value.as_string()));
    case Value::Type::kSequence:
      if (!value.is_sequence(Sequence::Kind::kGenerator)) return static_cast<std::int64_t>(value.as_sequence().items.size());
      break;
    case Value::Type::kMapping:
      if (value.is_dict()) return static_cast<std::int64_t>(value.as_mapping().entries.size());
      break;
    default: break;
  }
  throw TemplateError("object of type '" + type_name(value) + "' has no len()");
}

Value binary_arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (is_int_like(a) && is_int_like(b)) return int_arithmetic(op, a.as_int(), b.as_int());
    return float_arithmetic(op, a.as_float(), b.as_float());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
    if (a.is_list_or_tuple() && b.is_list_or_tuple() && a.as_sequence().kind == b.as_sequence().kind) {
      std::vector<Value> items = a.as_sequence().items;
      items.insert(items.end(), b.as_sequence().items.begin(), b.as_sequence().items.end());
      return Value::sequence(a.as_sequence().kind, std::move(items));
    }
    if (a.is_string()) throw TemplateError("can only concatenate str (not \"" + type_name(b) + "\") to str");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list_or_tuple()) && is_int_like(b)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list_or_tuple()) && is_int_like(a)) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) throw TemplateError("the '%' string formatting operator is not supported");
  fail_operands(op, a, b);
}

Value negate(const Value& value) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_float()) return Value::real(-value.as_float());
  if (is_int_like(value)) {
    if (value.as_int() == std::numeric_limits<std::int64_t>::min()) throw TemplateError("integer overflow in unary '-'");
    return Value::integer(-value.as_int());
  }
  throw TemplateError("bad operand type for unary -: '" + type_name(value) + "'");
}

std::string to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  json_into(value, style, 0, out);
  return out;
}

constexpr int kMaxJsonDepth = 512;   // each level a frame here; as io/bounded_json.hpp bounds data lines

Value from_json(const nlohmann::ordered_json& json, int depth) {
  using Kind = nlohmann::ordered_json::value_t;
  if (depth > kMaxJsonDepth) throw TemplateError("a JSON value nested deeper than 512 levels");
  switch (json.type()) {
    case Kind::null: return Value::none();
    case Kind::boolean: return Value::boolean(json.get<bool>());
    case Kind::number_integer: return Value::integer(json.get<std::int64_t>());
    case Kind::number_unsigned: {
      const auto u = json.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw TemplateError("integer " + std::to_string(u) + " does not fit in 64 bits");
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case Kind::number_float: return Value::real(json.get<double>());
    case Kind::string: return Value::string(json.get<std::string>());
    case Kind::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case Kind::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, from_json(item, depth + 1));
      return Value::dict(std::move(entries));
    }
    default: break;
  }
  throw TemplateError("a JSON value of type '" + std::string(json.type_name()) + "' has no template equivalent");
}

}  // namespace shardrl::jinja
