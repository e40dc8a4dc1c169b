// The text task's prompts as text, rendered in one place (docs/text-rl.md): the model's chat
// template with rl.template_variables and the generation prompt, rl.system_prompt as the first
// message (a chat that brings its own system message keeps it); with rl.chat_template = false the
// messages' contents joined. The text task renders its dataset's lines with it, and `generate
// --chat` and `tokenize --config --chat` their input, so that what they show is what the policy
// is trained on.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "rl/task.hpp"
#include "text/chat_prompt.hpp"
#include "text/hf_tokenizer.hpp"

namespace shardrl {

class TaskChat {
 public:
  // Reads options.system_prompt, chat_template and template_variables. InputError when
  // rl.template_variables is not a JSON object, or (with chat_template) the tokenizer has no
  // usable chat template.
  TaskChat(const HfTokenizer& tokenizer, const TextTaskOptions& options);
  // A chat: a non-empty array of {"role": string, "content"} (content a string without a
  // template). InputError for any other, or the template's own refusal (raise_exception); the
  // caller names where the messages came from.
  std::string render(const nlohmann::ordered_json& messages) const;
  // One user message.
  std::string render_user(const std::string& text) const;

 private:
  std::string system_prompt_;
  std::unique_ptr<ChatPrompt> prompt_;   // null: rl.chat_template = false
};

}  // namespace shardrl
