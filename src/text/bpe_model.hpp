// tokenizer.json's "model" of type BPE: a vocabulary, ranked merges, and Hugging Face's options
// (ignore_merges, byte_fallback, unk_token, fuse_unk). A piece is encoded by applying, again and
// again, the lowest-ranked merge among its adjacent symbols (HF's word.rs: a heap of candidate
// merges over a linked list of symbols, so a long piece costs n log n, not n^2). Encoded pieces
// are cached, as HF does, because natural text repeats its words.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shardrl::text {

// The most ids a tokenizer may name (2^24; the largest vocabularies have under 300K): ids index
// tables here, so an id of 2^31 - 1 in a malformed file overflowed one (a crash) or asked for
// gigabytes. `what()` names the token in the InputError for an id that is not an integer in
// [0, kMaxTokenId); it is called for that error only (a vocabulary has 150K tokens to check).
inline constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 24;
std::int32_t token_id_from_json(const nlohmann::json& id, const std::function<std::string()>& what);

struct BpeTables;   // text/tokenizer_json.hpp

class BpeModel {
 public:
  // `spec`: tokenizer.json's "model"; `tables`: its vocab and merges as read_tokenizer_json
  // streams them (where it did not, `spec` holds the value of another type that is the error).
  BpeModel(const nlohmann::json& spec, BpeTables tables, const std::string& origin);

  // Appends the ids of one pre-tokenized piece. Thread-safe.
  void encode(const std::string& piece, std::vector<std::int32_t>& ids) const;

  // The token of an id of the model's vocabulary, or nullptr.
  const std::string* token_of(std::int32_t id) const;
  // The id of a token of the vocabulary, or -1.
  std::int32_t id_of(std::string_view token) const;
  std::int32_t id_of(const std::string& token) const;   // without a copy of the token
  std::int32_t size() const { return static_cast<std::int32_t>(tokens_.size()); }

 private:
  void merge_word(const std::string& piece, std::vector<std::int32_t>& ids) const;

  std::unordered_map<std::string, std::int32_t> vocab_;
  std::vector<std::string> tokens_;                       // by id ("" where the vocabulary has a gap)
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges_;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::int32_t unk_ = -1;
  std::int32_t byte_ids_[256];                            // <0xXX> tokens for byte_fallback, -1 if absent

  // Pieces already encoded; bounded like HF's cache (10,000 words by default, each shorter than
  // 256 bytes: long pieces, rare and large, are encoded each time).
  static constexpr std::size_t kCacheCapacity = 10000;
  static constexpr std::size_t kCacheMaxPieceBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

}  // namespace shardrl::text
