// Jinja 3.1's filters and tests (jinja2/filters.py, jinja2/tests.py) and the globals, over
// jinja_value; the sandbox's attribute and item lookup and the str/dict methods are in
// jinja_members.cpp. transformers replaces Jinja's `tojson` with json.dumps(x,
// ensure_ascii=False, ...) and adds raise_exception and strftime_now; those are what this file
// implements.
#include "text/jinja_builtins.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <initializer_list>
#include <limits>

#include "text/jinja_arguments.hpp"

namespace shardrl::jinja {

namespace {

// The sandbox refuses larger ranges (jinja2.sandbox.MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

Value generator(std::vector<Value> items, std::string python_type = "generator") {
  return Value::sequence(Sequence::Kind::kGenerator, std::move(items), std::move(python_type));
}

std::optional<std::int64_t> parse_python_int(std::string_view text, int base) {
  const std::u32string cps = decode_utf8(text);
  std::size_t begin = 0;
  std::size_t end = cps.size();
  while (begin < end && is_python_space(cps[begin])) ++begin;
  while (end > begin && is_python_space(cps[end - 1])) --end;
  bool negative = false;
  if (begin < end && (cps[begin] == U'+' || cps[begin] == U'-')) negative = cps[begin++] == U'-';
  if (base != 10 && end - begin >= 2 && cps[begin] == U'0') {
    const char32_t prefix = cps[begin + 1] | 0x20;
    if ((base == 16 && prefix == U'x') || (base == 8 && prefix == U'o') || (base == 2 && prefix == U'b')) {
      begin += 2;
      if (begin < end && cps[begin] == U'_') ++begin;
    }
  }
  if (begin == end) return std::nullopt;
  std::int64_t value = 0;
  bool previous_digit = false;
  for (std::size_t i = begin; i < end; ++i) {
    const char32_t c = cps[i];
    if (c == U'_') {
      if (!previous_digit || i + 1 == end) return std::nullopt;
      previous_digit = false;
      continue;
    }
    int digit = -1;
    if (c >= U'0' && c <= U'9') digit = static_cast<int>(c - U'0');
    else if (c >= U'a' && c <= U'z') digit = static_cast<int>(c - U'a') + 10;
    else if (c >= U'A' && c <= U'Z') digit = static_cast<int>(c - U'A') + 10;
    if (digit < 0 || digit >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, digit, &value)) {
      throw TemplateError("integer does not fit in 64 bits: " + std::string(text));
    }
    previous_digit = true;
  }
  return negative ? -value : value;
}

std::optional<double> parse_python_float(std::string_view text) {
  const std::string trimmed = python_strip(text, std::nullopt, true, true);
  std::string body = trimmed;
  std::string sign;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body.substr(0, 1);
    body = body.substr(1);
  }
  std::string lower = body;
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  if (lower == "inf" || lower == "infinity") return sign == "-" ? -HUGE_VAL : HUGE_VAL;
  if (lower == "nan") return std::nan("");
  // digits[.digits][e[+-]digits], underscores only between digits.
  std::string clean = sign;
  std::size_t i = 0;
  auto digits = [&]() {
    const std::size_t start = i;
    while (i < body.size()) {
      if (body[i] >= '0' && body[i] <= '9') {
        clean.push_back(body[i++]);
      } else if (body[i] == '_' && i > start && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '9' &&
                 body[i - 1] != '_') {
        ++i;
      } else {
        break;
      }
    }
    return i > start;
  };
  const bool integer_part = digits();
  bool fraction_part = false;
  if (i < body.size() && body[i] == '.') {
    clean.push_back(body[i++]);
    fraction_part = digits();
  }
  if (!integer_part && !fraction_part) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    clean.push_back(body[i++]);
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) clean.push_back(body[i++]);
    if (!digits()) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then element 0, with getitem semantics.
Value lookup_attribute_path(const Value& item, const Value& attribute, const Value& default_value) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (auto& part : python_split(attribute.as_string(), std::string("."), -1)) {
      const bool all_digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      std::optional<std::int64_t> index;
      if (all_digits) index = parse_python_int(part, 10);
      parts.push_back(index ? Value::integer(*index) : Value::string(std::move(part)));
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  Value value = item;
  for (const Value& part : parts) {
    value = get_item(value, part);
    if (!default_value.is_none() && value.is_undefined()) value = default_value;
  }
  return value;
}

// --- tests ------------------------------------------------------------------------------------

bool is_iterable(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kString:
    case Value::Type::kSequence: return true;
    case Value::Type::kMapping: return !v.is_mapping(Mapping::Kind::kNamespace);
    default: return false;
  }
}

bool is_python_sequence(const Value& v) {
  if (v.is_undefined() || v.is_string() || v.is_list_or_tuple() || v.is_dict()) return true;
  return v.is_sequence(Sequence::Kind::kView) && v.as_sequence().python_type == "range";
}

bool same_object(const Value& a, const Value& b) {
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_bool() || b.is_bool()) return a.is_bool() && b.is_bool() && a.as_bool() == b.as_bool();
  if (a.type() == Value::Type::kSequence && b.type() == Value::Type::kSequence) return &a.as_sequence() == &b.as_sequence();
  if (a.type() == Value::Type::kMapping && b.type() == Value::Type::kMapping) return &a.as_mapping() == &b.as_mapping();
  if (a.is_callable() && b.is_callable()) return &a.as_callable() == &b.as_callable();
  if (a.type() != b.type() || a.is_undefined()) return false;
  throw TemplateError("'sameas' on " + type_name(a) + " values depends on Python object identity; use '=='");
}

std::string_view canonical_test(std::string_view name) {
  if (name == "==" || name == "equalto") return "eq";
  if (name == "!=") return "ne";
  if (name == "<" || name == "lessthan") return "lt";
  if (name == "<=") return "le";
  if (name == ">" || name == "greaterthan") return "gt";
  if (name == ">=") return "ge";
  return name;
}

constexpr std::string_view kSupportedTests[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string", "mapping",
    "iterable", "sequence", "callable", "sameas", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le",
    "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "odd", "even", "divisibleby"};

constexpr std::string_view kSupportedFilters[] = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "indent", "int", "items", "join", "last",
    "length", "list", "lower", "map", "reject", "rejectattr", "replace", "reverse", "safe", "select", "selectattr",
    "string", "title", "tojson", "trim", "upper"};

// select/reject/selectattr/rejectattr: the items whose test (or truthiness) is `keep`.
Value select_items(const Value& value, CallArgs& args, bool by_attribute, bool keep, std::string_view filter) {
  std::vector<Value> kept;
  if (!truthy(value)) return generator({});
  std::size_t offset = 0;
  Value attribute = Value::none();
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError(std::string(filter) + ": missing parameter for attribute name");
    attribute = args.positional[0];
    offset = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > offset) {
    test = string_argument(args.positional[offset], std::string(filter) + " test name");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(offset + 1), args.positional.end());
    test_args.keyword = args.keyword;
  } else if (!args.keyword.empty()) {
    throw TemplateError(std::string(filter) + ": keyword arguments need a test name");
  }
  for (const Value& item : iterate(value)) {
    const Value subject = by_attribute ? lookup_attribute_path(item, attribute, Value::none()) : item;
    bool passed = false;
    if (test) {
      CallArgs copy = test_args;
      passed = apply_test(*test, subject, copy);
    } else {
      passed = truthy(subject);
    }
    if (passed == keep) kept.push_back(item);
  }
  return generator(std::move(kept));
}

Value map_items(const Value& value, CallArgs& args) {
  if (!truthy(value)) return generator({});
  std::vector<Value> mapped;
  const auto attribute = std::find_if(args.keyword.begin(), args.keyword.end(), [](const auto& kw) { return kw.first == "attribute"; });
  if (args.positional.empty() && attribute != args.keyword.end()) {
    Value default_value = Value::none();
    for (const auto& [key, kw_value] : args.keyword) {
      if (key == "default") default_value = kw_value;
      else if (key != "attribute") throw TemplateError("map(): unexpected keyword argument '" + key + "'");
    }
    for (const Value& item : iterate(value)) mapped.push_back(lookup_attribute_path(item, attribute->second, default_value));
    return generator(std::move(mapped));
  }
  if (args.positional.empty()) throw TemplateError("map requires a filter argument");
  const std::string name = string_argument(args.positional[0], "map() filter name");
  if (!is_supported_filter(name)) throw TemplateError("unsupported filter '" + name + "' in map()");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(value)) {
    CallArgs copy = rest;
    mapped.push_back(apply_filter(name, item, copy));
  }
  return generator(std::move(mapped));
}

Value indent_filter(const Value& value, CallArgs& args) {
  if (value.is_undefined()) fail_undefined(value);
  if (!value.is_string()) throw TemplateError("indent: expected a string, got " + type_name(value));
  auto bound = bind_arguments({"indent", {"width", "first", "blank"}}, args,
                              {Value::integer(4), Value::boolean(false), Value::boolean(false)});
  const std::string indention = bound[0].is_string()
                                    ? bound[0].as_string()
                                    : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, int_argument(bound[0], "width"))), ' ');
  const std::string text = value.as_string() + "\n";  // Jinja's quirk, for splitlines()
  const std::vector<std::string> lines = python_splitlines(text);
  std::string out;
  if (truthy(bound[2])) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + (lines[i].empty() ? "" : indention);
      out += lines[i];
    }
  }
  if (truthy(bound[1])) out = indention + out;
  return Value::string(std::move(out));
}

Value tojson_filter(const Value& value, CallArgs& args) {
  auto bound = bind_arguments({"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}}, args,
                              {Value::boolean(false), Value::none(), Value::none(), Value::boolean(false)});
  JsonStyle style;
  style.ensure_ascii = truthy(bound[0]);
  if (bound[1].is_string()) {
    style.indent = bound[1].as_string();
  } else if (!bound[1].is_none()) {
    style.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, int_argument(bound[1], "indent"))), ' ');
  }
  if (!bound[2].is_none()) {
    if (!bound[2].is_list_or_tuple() || bound[2].as_sequence().items.size() != 2) {
      throw TemplateError("tojson(): separators must be a pair (item_separator, key_separator)");
    }
    style.item_separator = string_argument(bound[2].as_sequence().items[0], "item separator");
    style.key_separator = string_argument(bound[2].as_sequence().items[1], "key separator");
  }
  style.sort_keys = truthy(bound[3]);
  return Value::string(to_json(value, style));
}

Value int_filter(const Value& value, CallArgs& args) {
  auto bound = bind_arguments({"int", {"default", "base"}}, args, {Value::integer(0), Value::integer(10)});
  const std::int64_t base = int_argument(bound[1], "base");
  if (base != 2 && base != 8 && base != 10 && base != 16) throw TemplateError("int(): only bases 2, 8, 10 and 16 are supported");
  auto from_float = [&](double f) -> Value {
    if (std::isnan(f)) return bound[0];
    if (std::isinf(f)) throw TemplateError("cannot convert float infinity to integer");
    const double truncated = std::trunc(f);
    if (truncated < -9.2233720368547758e18 || truncated >= 9.2233720368547758e18) {
      throw TemplateError("integer does not fit in 64 bits");
    }
    return Value::integer(static_cast<std::int64_t>(truncated));
  };
  if (value.is_string()) {
    if (auto parsed = parse_python_int(value.as_string(), static_cast<int>(base))) return Value::integer(*parsed);
    // Jinja's quirk: "42.23"|int is 42.
    if (auto parsed = parse_python_float(value.as_string())) return from_float(*parsed);
    return bound[0];
  }
  if (value.is_float()) return from_float(value.as_float());
  if (value.is_int() || value.is_bool()) return Value::integer(value.as_int());
  return bound[0];
}

Value float_filter(const Value& value, CallArgs& args) {
  auto bound = bind_arguments({"float", {"default"}}, args, {Value::real(0.0)});
  if (value.is_string()) {
    if (auto parsed = parse_python_float(value.as_string())) return Value::real(*parsed);
    return bound[0];
  }
  if (value.is_number()) return Value::real(value.as_float());
  return bound[0];
}

Value first_item(const Value& value) {
  if (value.is_sequence(Sequence::Kind::kGenerator)) {
    Sequence& seq = value.as_sequence();
    if (seq.consumed < seq.items.size()) return seq.items[seq.consumed++];
  } else {
    const std::vector<Value> items = iterate(value);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value last_item(const Value& value) {
  if (value.type() == Value::Type::kSequence && !value.is_sequence(Sequence::Kind::kView) && !value.is_list_or_tuple()) {
    throw TemplateError("'" + type_name(value) + "' object is not reversible");
  }
  if (value.is_mapping(Mapping::Kind::kNamespace) || value.is_mapping(Mapping::Kind::kLoop)) {
    throw TemplateError("'" + type_name(value) + "' object is not reversible");
  }
  const std::vector<Value> items = iterate(value);
  if (!items.empty()) return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

Value reverse_filter(const Value& value) {
  if (value.is_string()) {
    std::u32string cps = decode_utf8(value.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(encode_utf8(cps));
  }
  if (value.is_sequence(Sequence::Kind::kGenerator)) {  // not reversible: Jinja makes a list
    std::vector<Value> items = iterate(value);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (value.type() == Value::Type::kSequence || value.is_dict() || value.is_undefined()) {
    std::vector<Value> items = iterate(value);
    std::reverse(items.begin(), items.end());
    return generator(std::move(items), value.is_dict() ? "dict_reversekeyiterator" : "reverseiterator");
  }
  throw TemplateError("reverse: argument must be iterable");
}

}  // namespace

std::vector<Value> bind_arguments(const ArgSpec& spec, CallArgs& args, std::vector<Value> defaults) {
  const std::size_t n = spec.names.size();
  const std::size_t required = n - std::min(n, defaults.size());
  const std::string function(spec.function);
  if (args.positional.size() > n) {
    throw TemplateError(function + "() takes at most " + std::to_string(n) + " argument(s) (" +
                        std::to_string(args.positional.size()) + " given)");
  }
  std::vector<std::optional<Value>> bound(n);
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = std::move(args.positional[i]);
  for (auto& [key, value] : args.keyword) {
    const auto it = std::find(spec.names.begin(), spec.names.end(), key);
    if (it == spec.names.end()) throw TemplateError(function + "() got an unexpected keyword argument '" + key + "'");
    auto& slot = bound[static_cast<std::size_t>(it - spec.names.begin())];
    if (slot) throw TemplateError(function + "() got multiple values for argument '" + key + "'");
    slot = std::move(value);
  }
  std::vector<Value> values;
  values.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (bound[i]) {
      values.push_back(std::move(*bound[i]));
    } else if (i < required) {
      throw TemplateError(function + "() missing required argument '" + std::string(spec.names[i]) + "'");
    } else {
      values.push_back(defaults[i - required]);
    }
  }
  return values;
}

bool is_supported_filter(std::string_view name) { return one_of(name, kSupportedFilters); }
bool is_supported_test(std::string_view name) { return one_of(name, kSupportedTests); }

Value apply_filter(std::string_view name, const Value& value, CallArgs& args) {
  const std::string function(name);
  auto no_arguments = [&] { bind_arguments({name, {}}, args); };
  if (name == "abs") {
    no_arguments();
    if (value.is_float()) return Value::real(std::fabs(value.as_float()));
    if (value.is_int() || value.is_bool()) return value.as_int() < 0 ? negate(value) : Value::integer(value.as_int());
    throw TemplateError("bad operand type for abs(): '" + type_name(value) + "'");
  }
  if (name == "capitalize") {
    no_arguments();
    return Value::string(python_capitalize(to_str(value)));
  }
  if (name == "lower") {
    no_arguments();
    return Value::string(python_lower(to_str(value)));
  }
  if (name == "upper") {
    no_arguments();
    return Value::string(python_upper(to_str(value)));
  }
  if (name == "title") {
    no_arguments();
    return Value::string(jinja_title_filter(to_str(value)));
  }
  if (name == "string" || name == "safe") {
    no_arguments();
    return Value::string(to_str(value));
  }
  if (name == "length" || name == "count") {
    no_arguments();
    return Value::integer(length_of(value));
  }
  if (name == "list") {
    no_arguments();
    return Value::list(iterate(value));
  }
  if (name == "first") {
    no_arguments();
    return first_item(value);
  }
  if (name == "last") {
    no_arguments();
    return last_item(value);
  }
  if (name == "reverse") {
    no_arguments();
    return reverse_filter(value);
  }
  if (name == "default" || name == "d") {
    auto bound = bind_arguments({name, {"default_value", "boolean"}}, args, {Value::string(""), Value::boolean(false)});
    if (value.is_undefined() || (truthy(bound[1]) && !truthy(value))) return bound[0];
    return value;
  }
  if (name == "trim") {
    auto bound = bind_arguments({name, {"chars"}}, args, {Value::none()});
    return Value::string(python_strip(to_str(value), optional_string(bound[0], "trim chars"), true, true));
  }
  if (name == "replace") {
    auto bound = bind_arguments({name, {"old", "new", "count"}}, args, {Value::none()});
    const std::int64_t count = bound[2].is_none() ? -1 : int_argument(bound[2], "count");
    return Value::string(python_replace(to_str(value), to_str(bound[0]), to_str(bound[1]), count));
  }
  if (name == "join") {
    auto bound = bind_arguments({name, {"d", "attribute"}}, args, {Value::string(""), Value::none()});
    const std::string separator = to_str(bound[0]);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(value)) {
      if (!first) out += separator;
      first = false;
      out += to_str(bound[1].is_none() ? item : lookup_attribute_path(item, bound[1], Value::none()));
    }
    return Value::string(std::move(out));
  }
  if (name == "items") {
    no_arguments();
    if (value.is_undefined()) return generator({});
    if (!value.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [key, item] : value.as_mapping().entries) pairs.push_back(Value::tuple({Value::string(key), item}));
    return generator(std::move(pairs));
  }
  if (name == "tojson") return tojson_filter(value, args);
  if ((name == "int" || name == "float") && value.is_undefined()) fail_undefined(value);  // int(Undefined) raises
  if (name == "int") return int_filter(value, args);
  if (name == "float") return float_filter(value, args);
  if (name == "indent") return indent_filter(value, args);
  if (name == "map") return map_items(value, args);
  if (name == "select") return select_items(value, args, false, true, name);
  if (name == "reject") return select_items(value, args, false, false, name);
  if (name == "selectattr") return select_items(value, args, true, true, name);
  if (name == "rejectattr") return select_items(value, args, true, false, name);
  throw TemplateError("unsupported filter '" + function + "'");
}

bool apply_test(std::string_view raw_name, const Value& value, CallArgs& args) {
  if (!is_supported_test(raw_name)) throw TemplateError("unsupported test '" + std::string(raw_name) + "'");
  const std::string_view name = canonical_test(raw_name);
  if (one_of(name, {"eq", "ne", "lt", "le", "gt", "ge", "in", "sameas", "divisibleby"})) {
    auto bound = bind_arguments({raw_name, {"other"}}, args);
    const Value& other = bound[0];
    if (name == "eq") return equals(value, other);
    if (name == "ne") return !equals(value, other);
    if (name == "lt") return compare_order("<", value, other);
    if (name == "le") return compare_order("<=", value, other);
    if (name == "gt") return compare_order(">", value, other);
    if (name == "ge") return compare_order(">=", value, other);
    if (name == "in") return contains(other, value);
    if (name == "sameas") return same_object(value, other);
    return equals(binary_arithmetic("%", value, other), Value::integer(0));
  }
  bind_arguments({raw_name, {}}, args);
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "boolean") return value.is_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "number") return value.is_number();
  if (name == "string") return value.is_string();
  if (name == "mapping") return value.is_dict();
  if (name == "iterable") return is_iterable(value);
  if (name == "sequence") return is_python_sequence(value);
  if (name == "callable") return value.is_callable();
  if (name == "odd") return equals(binary_arithmetic("%", value, Value::integer(2)), Value::integer(1));
  if (name == "even") return equals(binary_arithmetic("%", value, Value::integer(2)), Value::integer(0));
  throw TemplateError("unsupported test '" + std::string(raw_name) + "'");
}


std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back("range", Value::callable("range", [](CallArgs& args) {
    if (!args.keyword.empty()) throw TemplateError("range() takes no keyword arguments");
    if (args.positional.empty() || args.positional.size() > 3) throw TemplateError("range() takes 1 to 3 arguments");
    std::int64_t start = 0;
    std::int64_t stop = 0;
    std::int64_t step = 1;
    if (args.positional.size() == 1) {
      stop = int_argument(args.positional[0], "range() argument");
    } else {
      start = int_argument(args.positional[0], "range() argument");
      stop = int_argument(args.positional[1], "range() argument");
      if (args.positional.size() == 3) step = int_argument(args.positional[2], "range() argument");
    }
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    std::vector<Value> items;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<std::int64_t>(items.size()) >= kMaxRange) {
        throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      }
      items.push_back(Value::integer(i));
    }
    Value range = Value::sequence(Sequence::Kind::kView, std::move(items), "range");
    range.as_sequence().repr = "range(" + std::to_string(start) + ", " + std::to_string(stop) +
                               (step != 1 ? ", " + std::to_string(step) : std::string()) + ")";
    return range;
  }));
  auto make_mapping = [](Mapping::Kind kind, std::string_view function, CallArgs& args) {
    if (args.positional.size() > 1) throw TemplateError(std::string(function) + "() takes at most 1 positional argument");
    std::vector<std::pair<std::string, Value>> entries;
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict()) throw TemplateError(std::string(function) + "() positional argument must be a dict");
      entries = args.positional[0].as_mapping().entries;
    }
    Value result = Value::mapping(kind, std::move(entries));
    for (auto& [key, value] : args.keyword) result.as_mapping().set(key, value);
    return result;
  };
  globals.emplace_back("namespace", Value::callable("namespace", [make_mapping](CallArgs& args) {
    return make_mapping(Mapping::Kind::kNamespace, "namespace", args);
  }));
  globals.emplace_back("dict", Value::callable("dict", [make_mapping](CallArgs& args) {
    return make_mapping(Mapping::Kind::kDict, "dict", args);
  }));
  globals.emplace_back("raise_exception", Value::callable("raise_exception", [](CallArgs& args) -> Value {
    auto bound = bind_arguments({"raise_exception", {"message"}}, args);
    throw TemplateError("raise_exception: " + to_str(bound[0]));
  }));
  globals.emplace_back("strftime_now", Value::callable("strftime_now", [](CallArgs& args) {
    auto bound = bind_arguments({"strftime_now", {"format"}}, args);
    const std::string& format = string_argument(bound[0], "strftime_now() format");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(64 + format.size() * 8, '\0');
    const std::size_t written = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
    if (written == 0 && !format.empty()) throw TemplateError("strftime_now(): the formatted date is too long");
    out.resize(written);
    return Value::string(std::move(out));
  }));
  return globals;
}

}  // namespace shardrl::jinja
