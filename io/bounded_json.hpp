// JSON from a data file (a dataset line, a chat's template variables) parsed with its nesting
// bounded: deeper is refused as it is parsed, naming where. nlohmann's parser keeps a stack of its
// own, but a copy of the value, or its conversion to a template's data, recurses once per level:
// a dataset line of 100,000 nested lists crashed the job.
#pragma once

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace shardrl {

inline constexpr int kMaxJsonDepth = 512;   // no chat or dataset line needs more

// Json: nlohmann::json or nlohmann::ordered_json. Throws Json's parse_error for malformed text
// (the callers' "not valid JSON" message), InputError "<where>: ..." for nesting past the bound
// and for a key given twice in one object (nlohmann keeps the last one silently: a line's second
// "answer" replaced its first).
template <class Json>
Json parse_bounded_json(const std::string& text, const std::string& where) {
  using Event = typename Json::parse_event_t;
  std::vector<std::set<std::string>> keys;   // of each object being parsed, innermost last
  return Json::parse(text, [&](int depth, Event event, Json& parsed) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth)
      throw InputError(fmt::format("{}: JSON nested deeper than {} levels", where, kMaxJsonDepth));
    if (event == Event::object_start) keys.emplace_back();
    if (event == Event::object_end) keys.pop_back();
    if (event == Event::key && !keys.back().insert(parsed.template get<std::string>()).second)
      throw InputError(fmt::format("{}: key \"{}\" appears twice in one object", where, parsed.template get<std::string>()));
    return true;
  });
}

}  // namespace shardrl
