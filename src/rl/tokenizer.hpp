// The byte-level tokenizer of the `tiny` model: ids 0..255 are the bytes themselves, then three
// special tokens. Every byte string round-trips (UTF-8 or not); nothing is ever unknown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardrl::tokenizer {

inline constexpr std::int32_t kBos = 256;        // begins every sequence (added by the caller)
inline constexpr std::int32_t kEos = 257;        // ends a completion; decoding stops here
inline constexpr std::int32_t kPad = 258;        // fills unused positions of a batch
inline constexpr std::int32_t kVocabSize = 259;  // == model.vocab_size of the `tiny` preset

// One id per byte, no special tokens added.
std::vector<std::int32_t> encode(const std::string& text);

// The bytes of ids up to (not including) the first EOS; BOS and PAD are dropped. An id outside
// 0..kVocabSize-1 throws InputError naming it and its position.
std::string decode(const std::int32_t* ids, std::size_t count);
std::string decode(const std::vector<std::int32_t>& ids);

// A completion as the reward sees it: like decode, but an id beyond this tokenizer (a model
// whose vocabulary is larger than the byte tokenizer's, e.g. the llama-1b shape) becomes byte
// 0xFF, which no task answer contains, so such a completion is simply wrong, not an error.
std::string decode_completion(const std::vector<std::int32_t>& ids);

}  // namespace shardrl::tokenizer
