// The argument checks shared by the Jinja builtins' files (jinja_builtins.cpp: filters, tests,
// globals; jinja_members.cpp: attributes, items and methods): Python's messages for a wrong
// argument type. Private to src/text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja_value.hpp"

namespace shardrl::jinja {

inline bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}
template <std::size_t N>
inline bool one_of(std::string_view name, const std::string_view (&names)[N]) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

inline std::optional<std::string> optional_string(const Value& value, std::string_view what) {
  if (value.is_none()) return std::nullopt;
  if (!value.is_string()) throw TemplateError(std::string(what) + " must be None or a string, not " + type_name(value));
  return value.as_string();
}

inline std::int64_t int_argument(const Value& value, std::string_view what) {
  if (!value.is_int() && !value.is_bool()) {
    throw TemplateError(std::string(what) + " must be an integer, not " + type_name(value));
  }
  return value.as_int();
}

inline const std::string& string_argument(const Value& value, std::string_view what) {
  if (!value.is_string()) throw TemplateError(std::string(what) + " must be a string, not " + type_name(value));
  return value.as_string();
}

}  // namespace shardrl::jinja
