// A Replace step of tokenizer.json (a normalizer or a decoder): every occurrence of a literal
// string ({"String": s}) or of a regex ({"Regex": r}) becomes `content`.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "text/regex.hpp"

namespace shardrl::text {

class ReplacePattern {
 public:
  ReplacePattern(const nlohmann::json& spec, const std::string& origin);
  std::string apply(std::string_view text) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

}  // namespace shardrl::text
