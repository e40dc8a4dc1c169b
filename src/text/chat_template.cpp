// ChatTemplate: lexes and parses once, then renders each conversation with the variables
// transformers' apply_chat_template passes (messages, tools, documents, add_generation_prompt, ...).
#include "text/chat_template.hpp"

#include <utility>
#include <vector>

#include "core/error.hpp"
#include "text/jinja_eval.hpp"
#include "text/jinja_lexer.hpp"
#include "text/jinja_parser.hpp"

namespace shardrl {

ChatTemplate::ChatTemplate(std::string source, std::string origin) : origin_(std::move(origin)) {
  const std::vector<jinja::Token> tokens = jinja::lex_template(source, origin_);
  program_ = std::make_shared<const jinja::Program>(jinja::parse_template(tokens, origin_));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& variables) const {
  if (!messages.is_array()) {
    throw InputError(origin_ + ": messages must be a JSON array, got " + std::string(messages.type_name()));
  }
  if (!variables.is_object()) {
    throw InputError(origin_ + ": template variables must be a JSON object, got " + std::string(variables.type_name()));
  }
  std::vector<std::pair<std::string, jinja::Value>> values;
  try {
    values.emplace_back("tools", jinja::Value::none());
    values.emplace_back("documents", jinja::Value::none());
    for (const auto& [name, value] : variables.items()) {
      if (name == "messages" || name == "add_generation_prompt") {
        throw InputError(origin_ + ": template variable '" + name + "' is set by render() itself, not by `variables`");
      }
      values.emplace_back(name, jinja::from_json(value));
    }
    values.emplace_back("messages", jinja::from_json(messages));
  } catch (const jinja::TemplateError& error) {
    throw InputError(origin_ + ": " + error.what());
  }
  values.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  return jinja::render_program(*program_, origin_, std::move(values));
}

}  // namespace shardrl
