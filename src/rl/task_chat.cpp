#include "rl/task_chat.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/bounded_json.hpp"
#include "io/json_parse_message.hpp"

namespace shardrl {
namespace {

// Keys keep their order (a chat's tools print in it, as Python's dicts keep it in transformers).
using json = nlohmann::ordered_json;

json template_variables(const std::string& text) {
  try {
    return parse_bounded_json<json>(text.empty() ? std::string("{}") : text, "rl.template_variables");
  } catch (const json::exception& e) {   // parse_error, or out_of_range for a number like 1e999
    throw InputError(fmt::format("rl.template_variables is not valid JSON: {}", json_parse_message(e.what())));
  }
}

}  // namespace

TaskChat::TaskChat(const HfTokenizer& tokenizer, const TextTaskOptions& options)
    : system_prompt_(options.system_prompt) {
  if (!options.chat_template) return;
  json variables = template_variables(options.template_variables);
  if (!variables.is_object())
    throw InputError(fmt::format("rl.template_variables must be a JSON object, got {}", variables.type_name()));
  if (!tokenizer.chat_template_problem().empty()) throw InputError(tokenizer.chat_template_problem());
  if (tokenizer.chat_template().empty())
    throw InputError(fmt::format("{}/tokenizer_config.json has no chat_template (and there is no "
                                 "chat_template.jinja); set rl.chat_template = false to encode prompts as they are",
                                 tokenizer.dir().string()));
  prompt_ = std::make_unique<ChatPrompt>(tokenizer, std::move(variables));
}

std::string TaskChat::render_user(const std::string& text) const {
  return render(json::array({{{"role", "user"}, {"content", text}}}));
}

std::string TaskChat::render(const json& messages) const {
  if (!messages.is_array() || messages.empty())
    throw InputError("field \"messages\" must be a non-empty array of messages");
  for (const json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string())
      throw InputError("every message needs a string \"role\" and a \"content\"");
    // Without a chat template the prompt is the contents joined: each must be text.
    if (!prompt_ && !m["content"].is_string())
      throw InputError(fmt::format("a message's \"content\" must be a string without a chat template "
                                   "(rl.chat_template = false), got {}",
                                   m["content"].type_name()));
  }
  json all = json::array();
  if (!system_prompt_.empty() && messages[0]["role"] != "system")   // a chat's own system message keeps it
    all.push_back({{"role", "system"}, {"content", system_prompt_}});
  for (const json& m : messages) all.push_back(m);
  if (prompt_) return prompt_->render(all);
  std::string text;
  for (const json& m : all) text += m["content"].get<std::string>();
  return text;
}

}  // namespace shardrl
