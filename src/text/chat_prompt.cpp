#include "text/chat_prompt.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {
namespace {

const std::string& template_of(const HfTokenizer& t) {
  if (!t.chat_template_problem().empty()) throw InputError(t.chat_template_problem());
  if (t.chat_template().empty())
    throw InputError(fmt::format("{}/tokenizer_config.json has no chat_template (and there is no chat_template.jinja)",
                                 t.dir().string()));
  return t.chat_template();
}

}  // namespace

ChatPrompt::ChatPrompt(const HfTokenizer& tokenizer, nlohmann::ordered_json variables)
    : template_(template_of(tokenizer), tokenizer.chat_template_origin()),
      variables_(std::move(variables)) {
  if (!variables_.is_object()) throw InputError("chat template variables must be a JSON object");
  // As transformers passes them ({**special_tokens_map, **kwargs}): the tokenizer's special
  // tokens, a token it leaves unset (Qwen3's bos_token) undefined, and the caller's variables
  // over them.
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  if (!tokenizer.bos_token().empty()) all["bos_token"] = tokenizer.bos_token();
  if (!tokenizer.eos_token().empty()) all["eos_token"] = tokenizer.eos_token();
  for (const auto& [name, text] : tokenizer.other_special_tokens()) all[name] = text;
  for (const auto& [key, value] : variables_.items()) all[key] = value;
  variables_ = std::move(all);
}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages) const {
  return template_.render(messages, /*add_generation_prompt=*/true, variables_);
}

}  // namespace shardrl
