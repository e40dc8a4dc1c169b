// The table of every configuration key: name, type, default, range and meaning. Parsing,
// validation, printing, TOML output and the docs test all walk this one table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.hpp"

namespace shardrl {

enum class ValueKind { boolean, integer, real, string, choice, string_list };

using ConfigValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

struct KeyDef {
  std::string section;
  std::string key;
  ValueKind kind;
  std::string meaning;
  std::vector<std::string> choices;            // ValueKind::choice only
  std::optional<double> min, max;              // numeric kinds only, inclusive unless marked
  bool min_exclusive = false;
  bool max_exclusive = false;
  // Extra check of a well-typed value; returns a problem description or "".
  std::function<std::string(const ConfigValue&)> check;
  std::function<void(Config&, const ConfigValue&)> set;
  std::function<ConfigValue(const Config&)> get;

  std::string full_name() const { return section + "." + key; }
};

// Every key, in documentation order.
const std::vector<KeyDef>& config_schema();
const KeyDef* find_key(const std::string& section, const std::string& key);

// "string", "integer", "float", "boolean", "enum", "array of strings".
const char* kind_name(ValueKind kind);
// The value as a TOML literal: "abc" (quoted, escaped), 42, 0.5, true, ["a", "b"].
std::string to_toml_literal(const ConfigValue& value);

}  // namespace shardrl
