// tokenizer.json's "pre_tokenizer": how normalised text is cut into the pieces the model encodes
// one by one (a merge never crosses a piece). Supported: Split (a string or a PCRE2 regex, with
// Hugging Face's five delimiter behaviours and invert), ByteLevel (GPT-2's alphabet, optionally
// its regex and a prefix space), Metaspace (SentencePiece's U+2581), Sequence. Any other type is
// an InputError naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shardrl::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts each of `pieces` further (or rewrites it) in place. `at_start`: the pieces begin the
  // input (not text after an added token), which Metaspace's prepend_scheme = "first" needs.
  virtual void split(std::vector<std::string>& pieces, bool at_start) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& origin);

}  // namespace shardrl::text
