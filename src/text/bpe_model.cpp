#include "text/bpe_model.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <queue>
#include <tuple>

#include "core/error.hpp"
#include "text/tokenizer_json.hpp"
#include "text/utf8.hpp"

namespace shardrl::text {
namespace {

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (std::uint64_t(std::uint32_t(a)) << 32) | std::uint32_t(b);
}

}  // namespace

std::int32_t token_id_from_json(const nlohmann::json& id, const std::function<std::string()>& what) {
  if (!id.is_number_integer())
    throw InputError(fmt::format("{} has id {}, not an integer", what(), excerpt(id.dump())));
  if (id.is_number_unsigned() ? id.get<std::uint64_t>() >= static_cast<std::uint64_t>(kMaxTokenId)
                              : id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= kMaxTokenId)
    throw InputError(fmt::format("{} has id {}, outside [0, {})", what(), id.dump(), kMaxTokenId));
  return static_cast<std::int32_t>(id.get<std::int64_t>());
}

BpeModel::BpeModel(const nlohmann::json& spec, BpeTables tables, const std::string& origin) {
  const std::string at = origin + ": model";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (spec.contains(key) && spec[key].is_string() && !spec[key].get<std::string>().empty())
      throw InputError(fmt::format("{}: BPE with a {} is not supported", at, key));
  }
  if (spec.contains("dropout") && !spec["dropout"].is_null() && spec["dropout"].get<double>() > 0)
    throw InputError(fmt::format("{}: BPE dropout is not supported (it makes encoding random)", at));
  // The reader streams a vocab object and a merges array: what it left in `spec` is absent (the
  // key's error) or of another type.
  for (const auto& [key, streamed, wanted] : {std::tuple{"vocab", tables.vocab.has_value(), "an object"},
                                              std::tuple{"merges", tables.merges.has_value(), "an array"}})
    if (!streamed)
      throw InputError(fmt::format("{}: \"{}\" must be {}, got {}", at, key, wanted, spec.at(key).type_name()));

  // As from json::parse's map of the vocabulary (which Hugging Face's tokenizers read into a hash
  // map: the file's order was never the rule): a token listed twice keeps its last id (an earlier
  // one is not even checked), an id listed for several tokens is the greatest token's, and of
  // several bad ids the smallest token's is named.
  vocab_.reserve(tables.vocab->size());
  std::string bad_token;
  const nlohmann::json* bad_id = nullptr;
  const auto named = [&at](const std::string& token) { return [&] { return at + ": token " + excerpt(token); }; };
  for (auto e = tables.vocab->rbegin(); e != tables.vocab->rend(); ++e) {
    if (vocab_.count(e->token) != 0) continue;   // a later entry of the token took its place
    std::int32_t id = -1;
    try {
      id = token_id_from_json(e->id, named(e->token));
    } catch (const InputError&) {
      if (bad_id == nullptr || e->token < bad_token) bad_token = e->token, bad_id = &e->id;
    }
    vocab_.emplace(std::move(e->token), id);
  }
  if (bad_id != nullptr) token_id_from_json(*bad_id, named(bad_token));   // throws, naming it
  std::int32_t largest = -1;
  for (const auto& [token, id] : vocab_) largest = std::max(largest, id);
  tokens_.assign(static_cast<std::size_t>(largest + 1), std::string());
  for (const auto& [token, id] : vocab_) {
    std::string& slot = tokens_[static_cast<std::size_t>(id)];
    if (slot.empty() || token > slot) slot = token;
  }
  // Merges are "a b" strings (older files) or ["a", "b"] pairs; their order is their rank.
  merges_.reserve(tables.merges->size());
  std::int32_t rank = 0;
  std::string merged;
  for (BpeMerge& m : *tables.merges) {
    if (m.form == BpeMerge::Form::text) {
      const auto space = m.first.find(' ', 1);
      if (space == std::string::npos) throw InputError(fmt::format("{}: merge {} is not two tokens", at, rank));
      m.second = m.first.substr(space + 1);
      m.first.resize(space);
    } else if (m.form != BpeMerge::Form::pair) {
      throw InputError(fmt::format("{}: merge {} is neither \"a b\" nor [\"a\", \"b\"]", at, rank));
    }
    merged.assign(m.first).append(m.second);
    const std::int32_t ia = id_of(m.first), ib = id_of(m.second), im = id_of(merged);
    if (ia < 0 || ib < 0 || im < 0)
      throw InputError(fmt::format("{}: merge {} ({} + {}) names a token the vocabulary does not have", at, rank,
                                   excerpt(m.first), excerpt(m.second)));
    // A pair listed twice takes its last rank, as Hugging Face's map of merges (collected in order) does.
    merges_.insert_or_assign(pair_key(ia, ib), std::make_pair(rank, im));
    ++rank;
  }
  ignore_merges_ = spec.value("ignore_merges", false);
  byte_fallback_ = spec.value("byte_fallback", false);
  fuse_unk_ = spec.value("fuse_unk", false);
  if (spec.contains("unk_token") && spec["unk_token"].is_string()) {
    unk_ = id_of(spec["unk_token"].get<std::string>());
    if (unk_ < 0) throw InputError(fmt::format("{}: unk_token is not in the vocabulary", at));
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = id_of(fmt::format("<0x{:02X}>", b));
}

const std::string* BpeModel::token_of(std::int32_t id) const {
  if (id < 0 || id >= size() || tokens_[static_cast<std::size_t>(id)].empty()) return nullptr;
  return &tokens_[static_cast<std::size_t>(id)];
}

std::int32_t BpeModel::id_of(std::string_view token) const { return id_of(std::string(token)); }

std::int32_t BpeModel::id_of(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode(const std::string& piece, std::vector<std::int32_t>& ids) const {
  if (piece.empty()) return;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(piece);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int32_t> word;
  if (ignore_merges_) {
    const std::int32_t whole = id_of(piece);
    if (whole >= 0) word.push_back(whole);
  }
  if (word.empty()) merge_word(piece, word);
  ids.insert(ids.end(), word.begin(), word.end());
  if (piece.size() >= kCacheMaxPieceBytes) return;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(piece, std::move(word));
}

void BpeModel::merge_word(const std::string& piece, std::vector<std::int32_t>& out) const {
  // The initial symbols: one per character, or its bytes (<0xXX>) with byte_fallback, or unk.
  struct Symbol {
    std::int32_t id;
    int prev, next;   // -1 at the ends
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  bool last_was_unk = false;
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = std::min(utf8_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    const std::int32_t id = id_of(std::string_view(piece).substr(i, n));
    auto push = [&](std::int32_t s) {
      symbols.push_back({s, static_cast<int>(symbols.size()) - 1, -1, true});
    };
    if (id >= 0) {
      push(id);
      last_was_unk = false;
    } else if (byte_fallback_ && [&] {
                 for (std::size_t k = 0; k < n; ++k)
                   if (byte_ids_[static_cast<unsigned char>(piece[i + k])] < 0) return false;
                 return true;
               }()) {
      for (std::size_t k = 0; k < n; ++k) push(byte_ids_[static_cast<unsigned char>(piece[i + k])]);
      last_was_unk = false;
    } else if (unk_ >= 0) {
      if (!(fuse_unk_ && last_was_unk)) push(unk_);
      last_was_unk = true;
    } else {
      throw InputError(fmt::format("the tokenizer cannot encode the character {}: it is not in the vocabulary, and "
                                   "the model has {} and no unk_token",
                                   excerpt(piece.substr(i, n)),
                                   byte_fallback_ ? "byte_fallback but not every <0xXX> token of its bytes"
                                                  : "no byte_fallback"));
    }
    i += n;
  }
  for (std::size_t s = 0; s + 1 < symbols.size(); ++s) symbols[s].next = static_cast<int>(s + 1);

  // Candidate merges ordered by rank, then position (HF breaks ties leftmost first). An entry is
  // stale when either symbol has changed since it was queued.
  struct Candidate {
    std::int32_t rank;
    int left;
    std::int32_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end())
      queue.push({it->second.first, left, symbols[left].id, symbols[right].id, it->second.second});
  };
  for (int s = 0; s + 1 < static_cast<int>(symbols.size()); ++s) consider(s);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(c.left)];
    if (!left.alive || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    if (right.id != c.right_id) continue;
    left.id = c.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

}  // namespace shardrl::text
