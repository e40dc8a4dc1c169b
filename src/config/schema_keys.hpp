// The key table's builders (config/schema.cpp and the sections kept in files of their own):
// a typed field or enum choice of a config section, its bounds and its checks. Private to
// src/config.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/schema.hpp"

namespace shardrl::schema_keys {

template <class Section, class T>
KeyDef field(std::string section, std::string key, ValueKind kind, std::string meaning,
             Section Config::*sec, T Section::*member) {
  KeyDef d;
  d.section = std::move(section);
  d.key = std::move(key);
  d.kind = kind;
  d.meaning = std::move(meaning);
  d.set = [sec, member](Config& c, const ConfigValue& v) {
    if constexpr (std::is_same_v<T, double>) {
      (c.*sec).*member = std::holds_alternative<double>(v)
                             ? std::get<double>(v)
                             : static_cast<double>(std::get<std::int64_t>(v));
    } else {
      (c.*sec).*member = std::get<T>(v);
    }
  };
  d.get = [sec, member](const Config& c) { return ConfigValue((c.*sec).*member); };
  return d;
}

// An enum field stored as its name; `names` are in the enum's declaration order.
template <class Section, class E>
KeyDef choice(std::string section, std::string key, std::string meaning,
              Section Config::*sec, E Section::*member, std::vector<std::string> names) {
  KeyDef d;
  d.section = std::move(section);
  d.key = std::move(key);
  d.kind = ValueKind::choice;
  d.meaning = std::move(meaning);
  d.choices = names;
  d.set = [sec, member, names](Config& c, const ConfigValue& v) {
    const auto& s = std::get<std::string>(v);
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == s) (c.*sec).*member = static_cast<E>(i);
  };
  d.get = [sec, member, names](const Config& c) {
    return ConfigValue(names.at(static_cast<std::size_t>((c.*sec).*member)));
  };
  return d;
}

constexpr double kMaxInt = 2147483647.0;   // shapes index with int

inline KeyDef with_max(KeyDef d, double max, bool exclusive = false) {
  d.max = max;
  d.max_exclusive = exclusive;
  return d;
}

inline KeyDef with_min(KeyDef d, double min, bool exclusive = false) {
  d.min = min;
  d.min_exclusive = exclusive;
  return d;
}

inline std::string check_plain_name(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s.empty()) return "must not be empty";
  if (s == "." || s == "..") return "must be a plain name, not '" + s + "'";
  for (char ch : s) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.';
    if (!ok) return "must contain only letters, digits, '-', '_' and '.', got \"" + s + "\"";
  }
  return "";
}

inline std::string check_non_empty(const ConfigValue& v) {
  return std::get<std::string>(v).empty() ? "must not be empty" : "";
}

inline KeyDef non_empty(KeyDef d) {
  d.check = check_non_empty;
  return d;
}

// The [model] and [lora] keys, in table order (schema_model.cpp).
void add_model_keys(std::vector<KeyDef>& s);

}  // namespace shardrl::schema_keys
