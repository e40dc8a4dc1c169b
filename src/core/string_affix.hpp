// Whether a string begins or ends with another: std::string's starts_with and ends_with are
// C++20's, and the project is C++17.
#pragma once

#include <string_view>

namespace shardrl {

inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace shardrl
