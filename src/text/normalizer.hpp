// tokenizer.json's "normalizer": what is done to text before it is split, in the order given.
// Supported: NFC, NFD, NFKC, NFKD (utf8proc), Sequence, Prepend, Replace (a string or a regex),
// Strip. Any other type is an InputError naming it: a normalizer left out would change the ids
// silently.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace shardrl::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;   // valid UTF-8 in and out
};

// null for a JSON null (no normalizer). `origin` names the file and key in errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& origin);

}  // namespace shardrl::text
