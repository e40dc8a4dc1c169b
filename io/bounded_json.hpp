// JSON from a data file (a dataset line, a chat's template variables) parsed with its nesting
// bounded: deeper is refused as it is parsed, naming where. nlohmann's parser keeps a stack of its
// own, but a copy of the value, or its conversion to a template's data, recurses once per level:
// a dataset line of 100,000 nested lists crashed the job.
#pragma once

#include <fmt/format.h>

#include <string>

#include "core/error.hpp"

namespace shardrl {

inline constexpr int kMaxJsonDepth = 512;   // no chat or dataset line needs more

// Json: nlohmann::json or nlohmann::ordered_json. Throws Json's parse_error for malformed text
// (the callers' "not valid JSON" message), InputError "<where>: ..." for nesting past the bound.
template <class Json>
Json parse_bounded_json(const std::string& text, const std::string& where) {
  return Json::parse(text, [&](int depth, typename Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw InputError(fmt::format("{}: JSON nested deeper than {} levels", where, kMaxJsonDepth));
    return true;
  });
}

}  // namespace shardrl
