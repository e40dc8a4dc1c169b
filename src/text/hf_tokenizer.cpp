#include "text/hf_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/json_parse_message.hpp"
#include "text/bpe_model.hpp"
#include "text/normalizer.hpp"
#include "text/pre_tokenizer.hpp"
#include "text/token_decoder.hpp"
#include "text/tokenizer_json.hpp"
#include "text/utf8.hpp"

namespace shardrl {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path, const std::string& what) {
  const std::string text = read_input_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

// tokenizer_config.json writes a token as a string or as an AddedToken object {"content": ...}.
std::string token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// The code point at `text[i]` (valid UTF-8) and its length.
std::pair<char32_t, std::size_t> code_point_at(const std::string& text, std::size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = std::min(text::utf8_length(s[i]), text.size() - i);
  char32_t c = n == 1 ? s[i] : s[i] & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (s[i + k] & 0x3F);
  return {c, n};
}

}  // namespace

HfTokenizer::HfTokenizer(const fs::path& dir) : dir_(dir) {
  const fs::path file = dir / "tokenizer.json";
  text::TokenizerJson parsed = text::read_tokenizer_json(read_input_file(file, "tokenizer file"), file.string());
  const json& spec = parsed.rest;
  files_.push_back(file);
  const std::string origin = file.string();
  // The part being read, for a value of the wrong type found inside it (nlohmann's message alone
  // names neither the part nor the key).
  const char* part = "the file";
  try {
    if (!spec.is_object()) throw InputError(fmt::format("{}: expected a JSON object, got {}", origin, spec.type_name()));
    part = "normalizer";
    normalizer_ = text::make_normalizer(spec.value("normalizer", json()), origin);
    part = "pre_tokenizer";
    pre_tokenizer_ = text::make_pre_tokenizer(spec.value("pre_tokenizer", json()), origin);
    part = "model";
    const json& model = spec.at("model");
    const std::string type = model.value("type", "BPE");   // older files leave out the BPE type
    if (type != "BPE")
      throw InputError(fmt::format("{}: unsupported model type \"{}\" (supported: BPE)", origin, type));
    model_ = std::make_unique<text::BpeModel>(model, std::move(parsed.tables), origin);
    part = "decoder";
    decoder_ = text::make_token_decoder(spec.value("decoder", json()), origin);
    vocab_size_ = model_->size();

    part = "added_tokens";
    for (const json& a : spec.value("added_tokens", json::array())) {
      const std::string content = a.at("content").get<std::string>();
      // A token the model's vocabulary already has keeps the vocabulary's id, whatever the entry
      // says (Hugging Face's AddedVocabulary takes model.token_to_id first).
      const std::int32_t in_vocab = model_->id_of(content);
      const auto what = [&] { return origin + ": added token " + excerpt(content); };
      AddedToken t{content, in_vocab >= 0 ? in_vocab : text::token_id_from_json(a.at("id"), what),
                   a.value("special", false), a.value("normalized", false), a.value("lstrip", false),
                   a.value("rstrip", false), std::string()};
      if (a.value("single_word", false))
        throw InputError(fmt::format("{}: added token {} has single_word = true, which is not supported", origin,
                                     excerpt(t.content)));
      if (t.content.empty()) throw InputError(fmt::format("{}: an added token has empty content", origin));
      vocab_size_ = std::max(vocab_size_, t.id + 1);
      added_.push_back(std::move(t));
    }
    for (AddedToken& t : added_) {
      t.match = t.content;
      if (t.normalized && normalizer_) normalizer_->normalize(t.match);
      if (t.match.empty()) t.match = t.content;   // a normalizer that removes it all: matched as written
    }
    std::stable_sort(added_.begin(), added_.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.match.size() > b.match.size(); });
    for (auto& starts : added_starts_) starts.assign(256, false);
    added_by_id_.assign(static_cast<std::size_t>(vocab_size_), std::string());
    special_by_id_.assign(static_cast<std::size_t>(vocab_size_), false);
    for (const AddedToken& t : added_) {
      added_starts_[t.normalized ? 1 : 0][static_cast<unsigned char>(t.match[0])] = true;
      added_by_id_[static_cast<std::size_t>(t.id)] = t.content;
      special_by_id_[static_cast<std::size_t>(t.id)] = t.special;
    }

    // The post-processor matters only with add_special_tokens: ByteLevel's changes offsets alone;
    // TemplateProcessing's "single" template places special tokens around the sequence.
    std::function<void(const json&)> post = [&](const json& p) {
      if (p.is_null()) return;
      const std::string ptype = p.value("type", "");
      if (ptype == "ByteLevel") return;
      if (ptype == "Sequence") {
        for (const json& q : p.at("processors")) post(q);
        return;
      }
      if (ptype != "TemplateProcessing")
        throw InputError(fmt::format("{}: unsupported post_processor type \"{}\" (supported: TemplateProcessing, "
                                     "ByteLevel, Sequence)",
                                     origin, ptype));
      post_single_.clear();
      for (const json& item : p.at("single")) {
        if (item.contains("Sequence")) {
          post_single_.push_back({});
        } else {
          const std::string name = item.at("SpecialToken").at("id").get<std::string>();
          PostItem special;
          for (const json& id : p.at("special_tokens").at(name).at("ids")) special.ids.push_back(id.get<std::int32_t>());
          post_single_.push_back(std::move(special));
        }
      }
    };
    part = "post_processor";
    post(spec.value("post_processor", json()));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}: {}", origin, part, json_parse_message(e.what())));
  }

  // The side files are read in their own try: a value of the wrong type (a null eos id, a
  // non-object file) is the file's error, named with it, not an unexpected one.
  const auto read_side_file = [this](const fs::path& side, const char* what, auto&& use) {
    if (!fs::exists(side)) return;
    const json j = read_json(side, what);
    files_.push_back(side);
    try {
      if (!j.is_object()) throw InputError(fmt::format("expected a JSON object, got {}", j.type_name()));
      use(j);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: {}", side.string(), e.what()));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", side.string(), e.what()));
    }
  };
  read_side_file(dir / "tokenizer_config.json", "tokenizer config", [&](const json& config) {
    bos_token_ = token_text(config.value("bos_token", json()));
    eos_token_ = token_text(config.value("eos_token", json()));
    for (const char* name : kOtherSpecialTokens)
      if (const std::string text = token_text(config.value(name, json())); !text.empty())
        other_special_tokens_.emplace_back(name, text);
    const json tmpl = config.value("chat_template", json());
    if (tmpl.is_string()) {
      chat_template_ = tmpl.get<std::string>();
    } else if (tmpl.is_array()) {   // named templates: the "default" one
      std::string names;
      bool found = false;
      for (const json& t : tmpl) {
        const std::string name = t.value("name", "");
        names += (names.empty() ? "" : ", ") + name;
        if (name == "default") {
          chat_template_ = t.value("template", "");
          found = true;
        }
      }
      // (transformers takes "tool_use" when tools are passed; shardrl's prompts pass none.) Said
      // when a template is asked for, as transformers does: encoding needs none.
      if (!found)
        chat_template_problem_ = fmt::format("{}: chat_template lists named templates ({}) but none named "
                                             "\"default\", the one shardrl renders",
                                             (dir / "tokenizer_config.json").string(), names);
    }
  });
  chat_template_origin_ = (dir / "tokenizer_config.json").string() + ": chat_template";
  if (const fs::path jinja = dir / "chat_template.jinja"; fs::exists(jinja)) {
    chat_template_ = read_input_file(jinja, "chat template");
    files_.push_back(jinja);
    chat_template_origin_ = jinja.string();
    chat_template_problem_.clear();
  }
  // Older directories name the special tokens in special_tokens_map.json only.
  if (bos_token_.empty() || eos_token_.empty() || other_special_tokens_.empty())
    read_side_file(dir / "special_tokens_map.json", "special tokens map", [&](const json& map) {
      if (bos_token_.empty()) bos_token_ = token_text(map.value("bos_token", json()));
      if (eos_token_.empty()) eos_token_ = token_text(map.value("eos_token", json()));
      if (other_special_tokens_.empty())
        for (const char* name : kOtherSpecialTokens)
          if (const std::string text = token_text(map.value(name, json())); !text.empty())
            other_special_tokens_.emplace_back(name, text);
    });
  const fs::path generation_file = dir / "generation_config.json";
  read_side_file(generation_file, "generation config", [&](const json& generation) {
    const json eos = generation.value("eos_token_id", json());
    if (eos.is_number_integer()) eos_ids_.push_back(eos.get<std::int32_t>());
    else if (eos.is_array())
      for (const json& id : eos) eos_ids_.push_back(id.get<std::int32_t>());
  });
  if (eos_ids_.empty() && !eos_token_.empty()) {
    const std::int32_t id = token_id(eos_token_);
    if (id >= 0) eos_ids_.push_back(id);
  }
  for (std::int32_t id : eos_ids_)
    if (id < 0 || id >= vocab_size_)
      throw InputError(fmt::format("{}: eos_token_id {} is outside the vocabulary of {} ids", generation_file.string(), id,
                                   vocab_size_));
}

HfTokenizer::~HfTokenizer() = default;
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;

std::int32_t HfTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  return model_->id_of(token);
}

std::int32_t HfTokenizer::end_of_completion_id() const {
  const std::int32_t named = eos_token_.empty() ? -1 : token_id(eos_token_);
  if (named >= 0) return named;
  return eos_ids_.empty() ? -1 : eos_ids_.front();
}

bool HfTokenizer::is_special(std::int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_by_id_[static_cast<std::size_t>(id)];
}

void HfTokenizer::encode_plain(std::string piece, bool at_start, std::vector<std::int32_t>& ids) const {
  if (piece.empty()) return;
  std::vector<std::string> pieces{std::move(piece)};
  if (pre_tokenizer_) pre_tokenizer_->split(pieces, at_start);
  for (const std::string& p : pieces) model_->encode(p, ids);
}

void HfTokenizer::split_added(const std::string& text, bool normalized, bool at_start,
                              std::vector<std::int32_t>& ids) const {
  const std::vector<bool>& starts = added_starts_[normalized ? 1 : 0];
  // The text between added tokens: normalised then split on the normalised added tokens (first
  // pass), or encoded (second pass).
  auto plain = [&](std::size_t b, std::size_t e, bool first) {
    if (e <= b) return;
    std::string piece = text.substr(b, e - b);
    if (!normalized) {
      if (normalizer_) normalizer_->normalize(piece);
      split_added(piece, true, first, ids);
    } else {
      encode_plain(std::move(piece), first, ids);
    }
  };
  std::size_t done = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!starts[static_cast<unsigned char>(text[i])]) continue;
    const AddedToken* found = nullptr;
    for (const AddedToken& t : added_)   // longest first: the leftmost-longest match
      if (t.normalized == normalized && text.compare(i, t.match.size(), t.match) == 0) {
        found = &t;
        break;
      }
    if (!found) continue;
    std::size_t b = i, e = i + found->match.size();
    // lstrip / rstrip: the token takes the whitespace beside it.
    if (found->lstrip)
      while (b > done) {
        std::size_t s = b - 1;
        while (s > done && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        if (!text::is_whitespace(code_point_at(text, s).first)) break;
        b = s;
      }
    if (found->rstrip)
      while (e < text.size()) {
        const auto [c, n] = code_point_at(text, e);
        if (!text::is_whitespace(c)) break;
        e += n;
      }
    plain(done, b, at_start && done == 0);
    ids.push_back(found->id);
    done = e;
    i = e - 1;
  }
  plain(done, text.size(), at_start && done == 0);
}

std::vector<std::int32_t> HfTokenizer::encode(std::string_view input, bool add_special_tokens) const {
  const std::string text = text::to_valid_utf8(input);
  std::vector<std::int32_t> ids;
  split_added(text, false, true, ids);
  if (!add_special_tokens || post_single_.empty()) return ids;
  std::vector<std::int32_t> out;
  for (const PostItem& item : post_single_) {
    if (item.ids.empty()) out.insert(out.end(), ids.begin(), ids.end());
    else out.insert(out.end(), item.ids.begin(), item.ids.end());
  }
  return out;
}

std::string HfTokenizer::decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    if (id < 0) throw InputError(fmt::format("token id {} is negative ({})", id, dir_.string()));
    // An id with no token (beyond the vocabulary, e.g. a model's padded embedding rows, or a gap
    // in it) decodes to nothing, as Hugging Face's decode drops it.
    if (id >= vocab_size_) continue;
    const std::string& added = added_by_id_[static_cast<std::size_t>(id)];
    if (!added.empty()) {
      if (skip_special_tokens && special_by_id_[static_cast<std::size_t>(id)]) continue;
      tokens.push_back(added);
      continue;
    }
    if (const std::string* token = model_->token_of(id)) tokens.push_back(*token);
  }
  // Without a decoder Hugging Face joins the tokens with spaces; a decoder's pieces are joined as
  // they are.
  std::string out;
  if (decoder_) decoder_->decode_chain(tokens);
  for (std::size_t i = 0; i < tokens.size(); ++i) out += (i > 0 && !decoder_ ? " " : "") + tokens[i];
  return out;
}

}  // namespace shardrl
