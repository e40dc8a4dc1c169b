// A model's own Hugging Face tokenizer, in C++ (no Python at run time): tokenizer.json's
// normalizer, pre-tokenizer, BPE model (byte-level as in Qwen2/3 and Llama 3, SentencePiece-style
// with byte fallback as in Llama 2 / Mistral), added and special tokens, post-processor and
// decoder, plus what tokenizer_config.json and generation_config.json say about the special
// tokens and the chat template. The ids equal Hugging Face's own (tests/test_hf_tokenizer.cpp
// compares them with the Rust implementation on a corpus of every kind of text). Any component
// this does not implement is an InputError naming it, never an approximation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardrl {

namespace text {
class Normalizer;
class PreTokenizer;
class BpeModel;
class TokenDecoder;
}  // namespace text

class HfTokenizer {
 public:
  // Reads DIR/tokenizer.json (required) and, where present, DIR/tokenizer_config.json,
  // DIR/special_tokens_map.json (bos/eos when the config has none) and
  // DIR/generation_config.json. Bad or unsupported content: InputError naming the file and key.
  explicit HfTokenizer(const std::filesystem::path& dir);
  ~HfTokenizer();
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;

  // The ids of `text` (any bytes: ill-formed UTF-8 becomes U+FFFD first). Added tokens in the text
  // ("<|im_start|>") are matched before normalisation, as HF does; add_special_tokens runs the
  // post-processor (e.g. Llama 2's BOS).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // The text of `ids`; special tokens left out when skip_special_tokens. An id without a token
  // (beyond the vocabulary: a model's padded embedding rows) decodes to nothing, as in Hugging
  // Face's decode; a negative id is an InputError.
  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens = false) const;

  // Largest id + 1 over the model's vocabulary and the added tokens.
  std::int32_t vocab_size() const { return vocab_size_; }
  // The id of a token (an added token's content, or a vocabulary entry), or -1.
  std::int32_t token_id(std::string_view token) const;
  bool is_special(std::int32_t id) const;

  // The chat template ("" when there is none): chat_template.jinja where the directory has it
  // (where recent transformers' save_pretrained writes it; it overrides the config's),
  // else tokenizer_config.json's chat_template; and where it came from, for messages. The bos and
  // eos tokens ("" when unset), and the ids generation_config.json's eos_token_id lists (one or
  // a list; else the eos token's): Hugging Face's generate() stops at any of them, and so does
  // shardrl's rollout (rollout/stop_ids.hpp) beside end_of_completion_id().
  const std::string& chat_template() const { return chat_template_; }
  const std::string& chat_template_origin() const { return chat_template_origin_; }
  // Why there is no chat template when the files name some but not one shardrl renders ("" else).
  const std::string& chat_template_problem() const { return chat_template_problem_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // The other special tokens transformers names (unk, sep, pad, cls, mask) that the files set,
  // as (name, text), e.g. ("pad_token", "<|endoftext|>"): what a chat template sees besides bos
  // and eos (transformers 5 passes them: Qwen3's pad_token renders as <|endoftext|>).
  static constexpr const char* kOtherSpecialTokens[] = {"unk_token", "sep_token", "pad_token", "cls_token",
                                                        "mask_token"};
  const std::vector<std::pair<std::string, std::string>>& other_special_tokens() const {
    return other_special_tokens_;
  }
  const std::vector<std::int32_t>& eos_ids() const { return eos_ids_; }
  // The id that ends a completion: the eos token's (which ends a chat turn: Qwen's <|im_end|>,
  // Llama 3 Instruct's <|eot_id|>), else the first of eos_ids(), else -1.
  std::int32_t end_of_completion_id() const;
  const std::filesystem::path& dir() const { return dir_; }
  // The files read, tokenizer.json first: what the tokenizer and its template are made of.
  const std::vector<std::filesystem::path>& files() const { return files_; }

 private:
  struct AddedToken {
    std::string content;
    std::int32_t id;
    bool special, normalized, lstrip, rstrip;
    // What the text is searched for: the content, or for a normalized token its content through
    // the normalizer, as Hugging Face's added vocabulary matches it in the normalized text.
    std::string match;
  };
  struct PostItem {
    std::vector<std::int32_t> ids;   // a special token's ids, or empty for the sequence itself
  };
  // Cuts `text` at the added tokens of the given kind (normalized or not): the pieces between
  // them go to `plain`, each token's id is appended, in order.
  void split_added(const std::string& text, bool normalized, bool at_start, std::vector<std::int32_t>& ids) const;
  void encode_plain(std::string piece, bool at_start, std::vector<std::int32_t>& ids) const;

  std::filesystem::path dir_;
  std::vector<std::filesystem::path> files_;
  std::unique_ptr<text::Normalizer> normalizer_;
  std::unique_ptr<text::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<text::BpeModel> model_;
  std::unique_ptr<text::TokenDecoder> decoder_;
  std::vector<AddedToken> added_;                         // longest content first
  std::vector<bool> added_starts_[2];                     // [normalized]: bytes that begin some added token
  std::vector<std::string> added_by_id_;                  // id -> content ("" for model tokens)
  std::vector<bool> special_by_id_;
  std::vector<PostItem> post_single_;                     // TemplateProcessing "single", or empty
  std::int32_t vocab_size_ = 0;
  std::string chat_template_, chat_template_origin_, chat_template_problem_, bos_token_, eos_token_;
  std::vector<std::pair<std::string, std::string>> other_special_tokens_;
  std::vector<std::int32_t> eos_ids_;
};

}  // namespace shardrl
