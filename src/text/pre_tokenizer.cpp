#include "text/pre_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "text/byte_level.hpp"
#include "text/regex.hpp"

namespace shardrl::text {
namespace {

enum class Delimiter { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Delimiter delimiter_of(const std::string& name, const std::string& origin) {
  if (name == "Removed") return Delimiter::removed;
  if (name == "Isolated") return Delimiter::isolated;
  if (name == "MergedWithPrevious") return Delimiter::merged_with_previous;
  if (name == "MergedWithNext") return Delimiter::merged_with_next;
  if (name == "Contiguous") return Delimiter::contiguous;
  throw InputError(fmt::format("{}: unsupported Split behavior \"{}\"", origin, name));
}

// One piece cut at its matches (begin, end byte offsets, in order), as Hugging Face's
// NormalizedString::split does for each behaviour; empty pieces are dropped.
void cut(const std::string& piece, const std::vector<std::pair<std::size_t, std::size_t>>& matches, bool invert,
         Delimiter behavior, std::vector<std::string>& out) {
  // (begin, end, is a delimiter) covering the piece.
  struct Part {
    std::size_t b, e;
    bool delimiter;
  };
  std::vector<Part> parts;
  std::size_t at = 0;
  for (const auto& [b, e] : matches) {
    if (b > at) parts.push_back({at, b, invert});
    parts.push_back({b, e, !invert});
    at = e;
  }
  if (at < piece.size()) parts.push_back({at, piece.size(), invert});

  // Hugging Face's folds (tokenizers/src/tokenizer/normalizer.rs, NormalizedString::split), on
  // byte ranges.
  std::vector<std::pair<std::size_t, std::size_t>> kept;
  bool previous = false;
  switch (behavior) {
    case Delimiter::removed:
      for (const Part& p : parts)
        if (!p.delimiter) kept.emplace_back(p.b, p.e);
      break;
    case Delimiter::isolated:
      for (const Part& p : parts) kept.emplace_back(p.b, p.e);
      break;
    case Delimiter::merged_with_previous:
      for (const Part& p : parts) {
        if (p.delimiter && !previous && !kept.empty()) kept.back().second = p.e;
        else kept.emplace_back(p.b, p.e);
        previous = p.delimiter;
      }
      break;
    case Delimiter::merged_with_next:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->delimiter && !previous && !kept.empty()) kept.back().first = it->b;
        else kept.emplace_back(it->b, it->e);
        previous = it->delimiter;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Delimiter::contiguous:
      for (const Part& p : parts) {
        if (p.delimiter == previous && !kept.empty()) kept.back().second = p.e;
        else kept.emplace_back(p.b, p.e);
        previous = p.delimiter;
      }
      break;
  }
  for (const auto& [b, e] : kept)
    if (e > b) out.push_back(piece.substr(b, e - b));
}

class Split final : public PreTokenizer {
 public:
  Split(const nlohmann::json& spec, const std::string& origin)
      : behavior_(delimiter_of(spec.value("behavior", "Isolated"), origin)), invert_(spec.value("invert", false)) {
    const auto& pattern = spec.at("pattern");
    if (pattern.contains("Regex")) regex_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>(), origin);
    else if (pattern.contains("String")) literal_ = pattern["String"].get<std::string>();
    else throw InputError(fmt::format("{}: a Split pattern is {{\"String\": ...}} or {{\"Regex\": ...}}", origin));
  }
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size() * 4);
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    for (const std::string& piece : pieces) {
      matches.clear();
      if (regex_) {
        regex_->for_each_match(piece, [&](std::size_t b, std::size_t e) { matches.emplace_back(b, e); });
      } else if (!literal_.empty()) {
        for (std::size_t at = piece.find(literal_); at != std::string::npos; at = piece.find(literal_, at + literal_.size()))
          matches.emplace_back(at, at + literal_.size());
      }
      cut(piece, matches, invert_, behavior_, out);
    }
    pieces = std::move(out);
  }

 private:
  Delimiter behavior_;
  bool invert_;
  std::unique_ptr<Regex> regex_;
  std::string literal_;
};

// GPT-2's own pattern, used by ByteLevel with use_regex = true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(const nlohmann::json& spec, const std::string& origin) : add_prefix_space_(spec.value("add_prefix_space", true)) {
    if (spec.value("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern, origin);
  }
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size());
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    for (std::string& piece : pieces) {
      if (add_prefix_space_ && !piece.empty() && piece[0] != ' ') piece.insert(0, 1, ' ');
      if (regex_) {
        matches.clear();
        regex_->for_each_match(piece, [&](std::size_t b, std::size_t e) { matches.emplace_back(b, e); });
        std::vector<std::string> cuts;
        cut(piece, matches, false, Delimiter::isolated, cuts);
        for (auto& c : cuts) out.push_back(to_byte_level(c));
      } else if (!piece.empty()) {
        out.push_back(to_byte_level(piece));
      }
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const nlohmann::json& spec, const std::string& origin)
      : replacement_(spec.value("replacement", "\xE2\x96\x81")), split_(spec.value("split", true)) {
    if (spec.contains("prepend_scheme")) {
      const std::string scheme = spec["prepend_scheme"].get<std::string>();
      if (scheme == "always") prepend_ = Prepend::always;
      else if (scheme == "first") prepend_ = Prepend::first;
      else if (scheme == "never") prepend_ = Prepend::never;
      else throw InputError(fmt::format("{}: unsupported Metaspace prepend_scheme \"{}\"", origin, scheme));
    } else {
      prepend_ = spec.value("add_prefix_space", true) ? Prepend::always : Prepend::never;
    }
  }
  void split(std::vector<std::string>& pieces, bool at_start) const override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      std::string s;
      for (char c : pieces[i]) {
        if (c == ' ') s += replacement_;
        else s.push_back(c);
      }
      const bool prepend = prepend_ == Prepend::always || (prepend_ == Prepend::first && at_start && i == 0);
      if (prepend && s.compare(0, replacement_.size(), replacement_) != 0) s.insert(0, replacement_);
      if (!split_) {
        if (!s.empty()) out.push_back(std::move(s));
        continue;
      }
      std::vector<std::pair<std::size_t, std::size_t>> matches;
      for (std::size_t at = s.find(replacement_); at != std::string::npos; at = s.find(replacement_, at + replacement_.size()))
        matches.emplace_back(at, at + replacement_.size());
      cut(s, matches, false, Delimiter::merged_with_next, out);
    }
    pieces = std::move(out);
  }

 private:
  enum class Prepend { always, first, never };
  std::string replacement_;
  bool split_;
  Prepend prepend_ = Prepend::always;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::vector<std::string>& pieces, bool at_start) const override {
    for (const auto& s : steps_) s->split(pieces, at_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& origin) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  const std::string at = origin + ": pre_tokenizer " + type;
  if (type == "Split") return std::make_unique<Split>(spec, at);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(spec, at);
  if (type == "Metaspace") return std::make_unique<Metaspace>(spec, at);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& s : spec.at("pretokenizers"))
      if (auto p = make_pre_tokenizer(s, origin)) steps.push_back(std::move(p));
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw InputError(fmt::format("{}: unsupported pre_tokenizer type \"{}\" (supported: Split, ByteLevel, Metaspace, "
                               "Sequence)",
                               origin, type));
}

}  // namespace shardrl::text
