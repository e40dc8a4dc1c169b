#include "text/token_decoder.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "text/byte_level.hpp"
#include "text/replace_pattern.hpp"
#include "text/utf8.hpp"

namespace shardrl::text {
namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

// Every token back to its bytes (a token with a character outside the alphabet, an added token
// such as "<|im_end|>" with non-ASCII text, stays as it is), then one string, ill-formed UTF-8
// replaced as Rust's from_utf8_lossy does.
class ByteLevel final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mine;
      bool all = true;
      for (std::size_t i = 0; i < t.size() && all;) {
        utf8proc_int32_t c = 0;
        const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(t.data() + i),
                                        static_cast<utf8proc_ssize_t>(t.size() - i), &c);
        const int b = n > 0 ? byte_of_byte_level_char(static_cast<char32_t>(c)) : -1;
        if (b < 0) all = false;
        else mine.push_back(static_cast<char>(b));
        i += n > 0 ? static_cast<std::size_t>(n) : 1;
      }
      bytes += all ? mine : t;
    }
    tokens.assign(1, to_valid_utf8(bytes));
  }
};

class Metaspace final : public TokenDecoder {
 public:
  explicit Metaspace(const nlohmann::json& spec)
      : replacement_(spec.value("replacement", "\xE2\x96\x81")),
        strip_first_(spec.contains("prepend_scheme") ? spec["prepend_scheme"].get<std::string>() != "never"
                                                     : spec.value("add_prefix_space", true)) {}
  // Each replacement character becomes a space, except in the first token (with a prepend
  // scheme), where every one is dropped, as Hugging Face's decoder does: "▁▁", "▁Hello" decode to
  // " Hello", not "  Hello".
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out.push_back(' ');
          at += replacement_.size();
        } else {
          out.push_back(t[at++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class Replace final : public TokenDecoder {
 public:
  Replace(const nlohmann::json& spec, const std::string& origin) : replace_(spec, origin) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = replace_.apply(t);
  }

 private:
  ReplacePattern replace_;
};

// Runs of <0xXX> tokens become their bytes: the text when they form valid UTF-8, else one U+FFFD
// per byte (Hugging Face's rule, unlike from_utf8_lossy's).
class ByteFallback final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    std::size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (to_valid_utf8(run) == run) out.push_back(run);
      else for (std::size_t k = 0; k < run_tokens; ++k) out.emplace_back(kReplacementChar);
      run.clear();
      run_tokens = 0;
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        run.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Up to `start` leading and `stop` trailing copies of one character removed from every token.
class Strip final : public TokenDecoder {
 public:
  explicit Strip(const nlohmann::json& spec)
      : content_(spec.value("content", " ")), start_(spec.value("start", 0)), stop_(spec.value("stop", 0)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      for (int k = 0; k < start_ && t.compare(0, content_.size(), content_) == 0; ++k) t.erase(0, content_.size());
      for (int k = 0; k < stop_ && t.size() >= content_.size() &&
                      t.compare(t.size() - content_.size(), content_.size(), content_) == 0;
           ++k)
        t.erase(t.size() - content_.size());
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class Sequence final : public TokenDecoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<TokenDecoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

}  // namespace

std::unique_ptr<TokenDecoder> make_token_decoder(const nlohmann::json& spec, const std::string& origin) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  const std::string at = origin + ": decoder " + type;
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") return std::make_unique<Metaspace>(spec);
  if (type == "Replace") return std::make_unique<Replace>(spec, at);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(spec);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    for (const auto& s : spec.at("decoders"))
      if (auto d = make_token_decoder(s, origin)) steps.push_back(std::move(d));
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw InputError(fmt::format("{}: unsupported decoder type \"{}\" (supported: ByteLevel, Metaspace, Replace, "
                               "ByteFallback, Fuse, Strip, Sequence)",
                               origin, type));
}

}  // namespace shardrl::text
