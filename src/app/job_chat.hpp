// A prompt rendered as the job's text task renders its dataset's (rl/task_text.cpp): the model's
// chat template with rl.template_variables, and rl.system_prompt as the first message (a chat
// that brings its own system message keeps it); with rl.chat_template = false the messages'
// contents joined. One place for `generate --chat` and `tokenize --config --chat`, so that what
// they show is what the policy is trained on.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "text/chat_prompt.hpp"
#include "text/hf_tokenizer.hpp"

namespace shardrl {

class JobChat {
 public:
  // InputError when rl.template_variables is not a JSON object or the tokenizer has no template
  // (with rl.chat_template on).
  JobChat(const HfTokenizer& tokenizer, const Config& config);
  // One user message.
  std::string render_user(const std::string& text) const;
  // A chat: a non-empty array of {"role": string, "content"}, refused as the text task refuses it.
  std::string render(const nlohmann::ordered_json& messages) const;

 private:
  std::string system_prompt_;
  std::unique_ptr<ChatPrompt> prompt_;   // null: rl.chat_template = false
};

}  // namespace shardrl
