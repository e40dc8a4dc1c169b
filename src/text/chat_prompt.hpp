// A model's prompts as its users' tools build them: its chat template (tokenizer_config.json)
// rendered with the generation prompt, with the variables transformers passes (bos_token,
// eos_token) plus the job's own (e.g. Qwen3's enable_thinking). One place for `tokenize --chat`,
// `generate --chat` and the text task.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_template.hpp"
#include "text/hf_tokenizer.hpp"

namespace shardrl {

class ChatPrompt {
 public:
  // InputError when the tokenizer has no chat_template, or `variables` is not a JSON object.
  ChatPrompt(const HfTokenizer& tokenizer, nlohmann::ordered_json variables = nlohmann::ordered_json::object());
  // `messages`: a JSON array of {"role", "content"} objects.
  std::string render(const nlohmann::ordered_json& messages) const;

 private:
  ChatTemplate template_;
  nlohmann::ordered_json variables_;
};

}  // namespace shardrl
