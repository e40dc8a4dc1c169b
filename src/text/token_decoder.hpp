// tokenizer.json's "decoder": how the tokens of ids become text again, as a chain over the list
// of token strings (Hugging Face's decode_chain), joined at the end. Supported: ByteLevel,
// Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence; any other type is an InputError.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shardrl::text {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// null for a JSON null: the tokens are joined as they are.
std::unique_ptr<TokenDecoder> make_token_decoder(const nlohmann::json& spec, const std::string& origin);

}  // namespace shardrl::text
