#include "app/job_chat.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/bounded_json.hpp"
#include "io/json_parse_message.hpp"

namespace shardrl {
namespace {

nlohmann::ordered_json template_variables(const Config& config) {
  if (config.rl.template_variables.empty()) return nlohmann::ordered_json::object();
  try {
    return parse_bounded_json<nlohmann::ordered_json>(config.rl.template_variables, "rl.template_variables");
  } catch (const nlohmann::json::exception& e) {   // parse_error, or out_of_range for a number like 1e999
    throw InputError(fmt::format("rl.template_variables is not valid JSON: {}", json_parse_message(e.what())));
  }
}

}  // namespace

JobChat::JobChat(const HfTokenizer& tokenizer, const Config& config) : system_prompt_(config.rl.system_prompt) {
  if (config.rl.chat_template) prompt_ = std::make_unique<ChatPrompt>(tokenizer, template_variables(config));
}

std::string JobChat::render_user(const std::string& text) const {
  return render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}}));
}

std::string JobChat::render(const nlohmann::ordered_json& messages) const {
  if (!messages.is_array() || messages.empty())
    throw InputError("field \"messages\" must be a non-empty array of messages");
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string())
      throw InputError("every message needs a string \"role\" and a \"content\"");
    if (!prompt_ && !m["content"].is_string())
      throw InputError(fmt::format("a message's \"content\" must be a string without a chat template "
                                   "(rl.chat_template = false), got {}",
                                   m["content"].type_name()));
  }
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (!system_prompt_.empty() && messages[0]["role"] != "system")   // a chat's own system message keeps it
    all.push_back({{"role", "system"}, {"content", system_prompt_}});
  for (const auto& m : messages) all.push_back(m);
  if (prompt_) return prompt_->render(all);
  std::string text;   // as the text task encodes a prompt without a chat template
  for (const auto& m : all) text += m["content"].get<std::string>();
  return text;
}

}  // namespace shardrl
