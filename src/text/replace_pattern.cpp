#include "text/replace_pattern.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace shardrl::text {

ReplacePattern::ReplacePattern(const nlohmann::json& spec, const std::string& origin)
    : content_(spec.at("content").get<std::string>()) {
  const auto& pattern = spec.at("pattern");
  if (pattern.contains("String")) literal_ = pattern["String"].get<std::string>();
  else if (pattern.contains("Regex")) regex_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>(), origin);
  else throw InputError(fmt::format("{}: a Replace pattern is {{\"String\": ...}} or {{\"Regex\": ...}}", origin));
  if (!regex_ && literal_.empty()) throw InputError(fmt::format("{}: a Replace pattern is empty", origin));
}

std::string ReplacePattern::apply(std::string_view text) const {
  std::string out;
  std::size_t done = 0;
  auto replace = [&](std::size_t b, std::size_t e) {
    out.append(text.data() + done, b - done);
    out += content_;
    done = e;
  };
  if (regex_) {
    regex_->for_each_match(text, replace);
  } else {
    for (std::size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, done))
      replace(at, at + literal_.size());
  }
  out.append(text.data() + done, text.size() - done);
  return out;
}

}  // namespace shardrl::text
