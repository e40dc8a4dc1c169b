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

JobChat::JobChat(const HfTokenizer& tokenizer, const Config& config)
    : system_prompt_(config.rl.system_prompt), prompt_(tokenizer, template_variables(config)) {}

std::string JobChat::render_user(const std::string& text) const {
  return render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}}));
}

std::string JobChat::render(const nlohmann::ordered_json& messages) const {
  const bool own_system = messages.is_array() && !messages.empty() && messages[0].is_object() &&
                          messages[0].value("role", "") == "system";
  if (system_prompt_.empty() || own_system) return prompt_.render(messages);
  nlohmann::ordered_json all = nlohmann::ordered_json::array({{{"role", "system"}, {"content", system_prompt_}}});
  for (const auto& m : messages) all.push_back(m);
  return prompt_.render(all);
}

}  // namespace shardrl
