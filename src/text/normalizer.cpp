#include "text/normalizer.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.hpp"
#include "text/regex.hpp"
#include "text/replace_pattern.hpp"
#include "text/utf8.hpp"

namespace shardrl::text {
namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(utf8proc_option_t options) : options_(options) {}
  void normalize(std::string& text) const override {
    if (is_ascii(text)) return;   // every normal form of ASCII is itself
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out, options_);
    if (n < 0) throw InputError(fmt::format("Unicode normalisation failed: {}", utf8proc_errmsg(n)));
    text.assign(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    std::free(out);
  }

 private:
  utf8proc_option_t options_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Hugging Face's Prepend adds its string only to non-empty text.
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(const nlohmann::json& spec, const std::string& origin) : replace_(spec, origin) {}
  void normalize(std::string& text) const override { text = replace_.apply(text); }

 private:
  ReplacePattern replace_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    auto is_space = [](utf8proc_int32_t c) { return is_whitespace(static_cast<char32_t>(c)); };
    std::size_t b = 0, e = text.size();
    if (left_)
      while (b < e) {
        utf8proc_int32_t c = 0;
        const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + b), e - b, &c);
        if (n <= 0 || !is_space(c)) break;
        b += static_cast<std::size_t>(n);
      }
    if (right_)
      while (e > b) {
        std::size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        utf8proc_int32_t c = 0;
        const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + s), e - s, &c);
        if (n <= 0 || !is_space(c)) break;
        e = s;
      }
    text = text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& origin) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  const std::string at = origin + ": normalizer " + type;
  if (type == "NFC") return std::make_unique<UnicodeForm>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (type == "NFD") return std::make_unique<UnicodeForm>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  if (type == "NFKC")
    return std::make_unique<UnicodeForm>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD")
    return std::make_unique<UnicodeForm>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& s : spec.at("normalizers"))
      if (auto n = make_normalizer(s, origin)) steps.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(steps));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(spec.at("prepend").get<std::string>());
  if (type == "Replace") return std::make_unique<Replace>(spec, at);
  if (type == "Strip") return std::make_unique<Strip>(spec.value("strip_left", true), spec.value("strip_right", true));
  throw InputError(fmt::format("{}: unsupported normalizer type \"{}\" (supported: NFC, NFD, NFKC, NFKD, Sequence, "
                               "Prepend, Replace, Strip)",
                               origin, type));
}

}  // namespace shardrl::text
