// Byte-level tokenizer (see tokenizer.hpp).
#include "rl/tokenizer.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl::tokenizer {

std::vector<std::int32_t> encode(const std::string& text) {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(c)));
  return ids;
}

std::string decode(const std::int32_t* ids, std::size_t count) {
  std::string text;
  text.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::int32_t id = ids[i];
    if (id < 0 || id >= kVocabSize)
      throw InputError(fmt::format("token id {} at position {} is outside the vocabulary (0..{})",
                                   id, i, kVocabSize - 1));
    if (id == kEos) break;
    if (id < 256) text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

std::string decode(const std::vector<std::int32_t>& ids) { return decode(ids.data(), ids.size()); }

std::string decode_completion(const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> clamped(ids);
  for (auto& id : clamped)
    if (id < 0 || id >= kVocabSize) id = 0xFF;
  return decode(clamped);
}

}  // namespace shardrl::tokenizer
