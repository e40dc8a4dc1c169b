// The sandbox's attribute and item lookup (jinja2/sandbox.py: getattr, getitem, slices) and the
// str and dict methods templates call, over jinja_value; the filters, tests and globals are in
// jinja_builtins.cpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "text/jinja_arguments.hpp"
#include "text/jinja_builtins.hpp"

namespace shardrl::jinja {

namespace {

// Python's names for messages about objects: "'dict object'", "'None'".
std::string object_description(const Value& value) {
  if (value.is_none()) return "'None'";
  return "'" + type_name(value) + " object'";
}

Value no_attribute(const Value& object, const std::string& name) {
  return Value::undefined(object_description(object) + " has no attribute '" + name + "'");
}

Value no_element(const Value& object, const Value& key) {
  const std::string description = object_description(object);  // Jinja quotes it for attributes only
  return Value::undefined(description.substr(1, description.size() - 2) + " has no element " + to_repr(key));
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts) items.push_back(Value::string(std::move(part)));
  return Value::list(std::move(items));
}

Value call_method(const Value& receiver, const std::string& name, CallArgs& args);

Value bound_method(const Value& receiver, const std::string& name) {
  return Value::callable(name, [receiver, name](CallArgs& args) { return call_method(receiver, name, args); });
}

Value str_method(const std::string& text, const std::string& name, CallArgs& args) {
  const std::string function = "str." + name;
  if (name == "startswith" || name == "endswith") {
    auto bound = bind_arguments({function, {"prefix", "start", "end"}}, args, {Value::none(), Value::none()});
    if (!bound[1].is_none() || !bound[2].is_none()) throw TemplateError(function + "(): start and end are not supported");
    std::vector<Value> candidates;
    if (bound[0].is_sequence(Sequence::Kind::kTuple)) candidates = bound[0].as_sequence().items;
    else if (bound[0].is_string()) candidates.push_back(bound[0]);
    else throw TemplateError(function + "() first arg must be str or a tuple of str, not " + type_name(bound[0]));
    for (const Value& candidate : candidates) {
      const std::string& affix = string_argument(candidate, function + "() tuple item");
      const bool match = name == "startswith"
                             ? text.compare(0, affix.size(), affix) == 0
                             : text.size() >= affix.size() && text.compare(text.size() - affix.size(), affix.size(), affix) == 0;
      if (match) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto bound = bind_arguments({function, {"chars"}}, args, {Value::none()});
    return Value::string(python_strip(text, optional_string(bound[0], "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto bound = bind_arguments({function, {"sep", "maxsplit"}}, args, {Value::none(), Value::integer(-1)});
    const auto sep = optional_string(bound[0], "sep");
    const std::int64_t maxsplit = int_argument(bound[1], "maxsplit");
    return string_list(name == "split" ? python_split(text, sep, maxsplit) : python_rsplit(text, sep, maxsplit));
  }
  if (name == "splitlines") {
    bind_arguments({function, {}}, args);
    return string_list(python_splitlines(text));
  }
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
    bind_arguments({function, {}}, args);
    if (name == "lower") return Value::string(python_lower(text));
    if (name == "upper") return Value::string(python_upper(text));
    if (name == "title") return Value::string(python_title(text));
    return Value::string(python_capitalize(text));
  }
  if (name == "replace") {
    auto bound = bind_arguments({function, {"old", "new", "count"}}, args, {Value::integer(-1)});
    return Value::string(python_replace(text, string_argument(bound[0], "old"), string_argument(bound[1], "new"),
                                        int_argument(bound[2], "count")));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto bound = bind_arguments({function, {"affix"}}, args);
    const std::string& affix = string_argument(bound[0], function + "() argument");
    if (name == "removeprefix" && text.compare(0, affix.size(), affix) == 0) return Value::string(text.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && text.size() >= affix.size() &&
        text.compare(text.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::string(text.substr(0, text.size() - affix.size()));
    }
    return Value::string(text);
  }
  if (name == "find" || name == "rfind" || name == "count") {
    auto bound = bind_arguments({function, {"sub"}}, args);
    const std::string& sub = string_argument(bound[0], function + "() argument");
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<std::int64_t>(count_code_points(text)) + 1);
      std::int64_t n = 0;
      for (std::size_t at = text.find(sub); at != std::string::npos; at = text.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    const std::size_t at = name == "find" ? text.find(sub) : text.rfind(sub);
    if (at == std::string::npos) return Value::integer(-1);
    return Value::integer(static_cast<std::int64_t>(count_code_points(std::string_view(text).substr(0, at))));
  }
  if (name == "join") {
    auto bound = bind_arguments({function, {"iterable"}}, args);
    std::string out;
    std::size_t index = 0;
    for (const Value& item : iterate(bound[0])) {
      if (!item.is_string()) {
        throw TemplateError("sequence item " + std::to_string(index) + ": expected str instance, " + type_name(item) + " found");
      }
      if (index++ > 0) out += text;
      out += item.as_string();
    }
    return Value::string(std::move(out));
  }
  throw TemplateError("unsupported str method '" + name + "'");
}

Value dict_method(const Value& dict, const std::string& name, CallArgs& args) {
  const std::string function = "dict." + name;
  const Mapping& mapping = dict.as_mapping();
  if (name == "get") {
    auto bound = bind_arguments({function, {"key", "default"}}, args, {Value::none()});
    if (bound[0].is_string()) {
      if (const Value* found = mapping.find(bound[0].as_string())) return *found;
    }
    return bound[1];
  }
  bind_arguments({function, {}}, args);
  std::vector<Value> items;
  for (const auto& [key, value] : mapping.entries) {
    if (name == "items") items.push_back(Value::tuple({Value::string(key), value}));
    else if (name == "keys") items.push_back(Value::string(key));
    else items.push_back(value);
  }
  return Value::sequence(Sequence::Kind::kView, std::move(items), "dict_" + name);
}

Value call_method(const Value& receiver, const std::string& name, CallArgs& args) {
  if (receiver.is_string()) return str_method(receiver.as_string(), name, args);
  return dict_method(receiver, name, args);
}

constexpr std::string_view kSupportedStrMethods[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "lower", "upper",
    "title", "capitalize", "replace", "removeprefix", "removesuffix", "find", "rfind", "count", "join"};
constexpr std::string_view kOtherStrMethods[] = {
    "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isalpha", "isascii",
    "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
    "ljust", "maketrans", "partition", "rindex", "rjust", "rpartition", "swapcase", "translate", "zfill"};
constexpr std::string_view kOtherDictMethods[] = {"clear", "copy", "fromkeys", "pop", "popitem",
                                                                      "setdefault", "update"};
constexpr std::string_view kListMethods[] = {"append", "clear", "copy", "count", "extend", "index",
                                                                 "insert", "pop", "remove", "reverse", "sort"};

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.type()) {
    case Value::Type::kUndefined: fail_undefined(object);
    case Value::Type::kString:
      if (one_of(name, kSupportedStrMethods)) return bound_method(object, name);
      if (one_of(name, kOtherStrMethods)) throw TemplateError("unsupported str method '" + name + "'");
      return no_attribute(object, name);
    case Value::Type::kMapping: {
      if (object.is_dict()) {
        if (one_of(name, {"get", "items", "keys", "values"})) return bound_method(object, name);
        if (one_of(name, kOtherDictMethods)) throw TemplateError("unsupported dict method '" + name + "'");
      }
      if (const Value* found = object.as_mapping().find(name)) return *found;
      return no_attribute(object, name);
    }
    case Value::Type::kSequence:
      if (object.is_list_or_tuple() && one_of(name, kListMethods)) {
        throw TemplateError("unsupported " + type_name(object) + " method '" + name + "'");
      }
      return no_attribute(object, name);
    default: return no_attribute(object, name);
  }
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  const bool int_key = key.is_int() || key.is_bool();
  const bool indexable = object.is_string() || object.is_list_or_tuple() ||
                         (object.is_sequence(Sequence::Kind::kView) && object.as_sequence().python_type == "range");
  if (indexable && int_key) {
    const std::int64_t size = length_of(object);
    std::int64_t index = key.as_int();
    if (index < 0) index += size;
    if (index >= 0 && index < size) {
      if (!object.is_string()) return object.as_sequence().items[static_cast<std::size_t>(index)];
      const std::u32string cps = decode_utf8(object.as_string());
      return Value::string(encode_utf8(std::u32string_view(cps).substr(static_cast<std::size_t>(index), 1)));
    }
    return no_element(object, key);
  }
  if (object.is_dict() && key.is_string()) {
    if (const Value* found = object.as_mapping().find(key.as_string())) return *found;
  }
  // Python's obj[key] failed: Jinja falls back to the attribute of that name.
  if (key.is_string()) return get_attribute(object, key.as_string());
  if (object.is_dict() && (key.is_sequence(Sequence::Kind::kList) || key.is_dict())) {
    throw TemplateError("unhashable type: '" + type_name(key) + "'");
  }
  return no_element(object, key);
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  // Jinja compiles a slice to Python's own obj[a:b:c], without the item/attribute fallback of
  // obj[key]: every failure is Python's error, none becomes Undefined.
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict()) throw TemplateError("unhashable type: 'slice'");
  if (object.is_sequence(Sequence::Kind::kView) && object.as_sequence().python_type == "range") {
    throw TemplateError("slicing a range is not supported; convert it with |list first");
  }
  if (!object.is_string() && !object.is_list_or_tuple()) {
    throw TemplateError("'" + type_name(object) + "' object is not subscriptable");
  }
  for (const Value* part : {&start, &stop, &step}) {
    if (!part->is_none() && !part->is_int() && !part->is_bool()) {
      throw TemplateError("slice indices must be integers or None or have an __index__ method");
    }
  }
  const std::int64_t step_value = step.is_none() ? 1 : step.as_int();
  if (step_value == 0) throw TemplateError("slice step cannot be zero");
  const std::u32string cps = object.is_string() ? decode_utf8(object.as_string()) : std::u32string();
  const std::int64_t size = object.is_string() ? static_cast<std::int64_t>(cps.size())
                                               : static_cast<std::int64_t>(object.as_sequence().items.size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](const Value& bound, std::int64_t fallback) {
    if (bound.is_none()) return fallback;
    std::int64_t index = bound.as_int();
    if (index < 0) {
      index += size;
      if (index < 0) index = step_value < 0 ? -1 : 0;
    } else if (index >= size) {
      index = step_value < 0 ? size - 1 : size;
    }
    return index;
  };
  const std::int64_t first = adjust(start, step_value < 0 ? size - 1 : 0);
  const std::int64_t last = adjust(stop, step_value < 0 ? -1 : size);
  std::vector<std::int64_t> indices;
  for (std::int64_t i = first; step_value > 0 ? i < last : i > last; i += step_value) indices.push_back(i);
  if (object.is_string()) {
    std::u32string out;
    for (std::int64_t i : indices) out.push_back(cps[static_cast<std::size_t>(i)]);
    return Value::string(encode_utf8(out));
  }
  std::vector<Value> items;
  for (std::int64_t i : indices) items.push_back(object.as_sequence().items[static_cast<std::size_t>(i)]);
  return Value::sequence(object.as_sequence().kind, std::move(items));
}

}  // namespace shardrl::jinja
