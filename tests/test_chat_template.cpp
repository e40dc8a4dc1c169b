// Tests of ChatTemplate (src/text/chat_template.hpp): the Jinja subset against exact strings (each
// one what Python's Jinja 3.1, configured as transformers configures it, renders), and its errors.
// Parity with @huggingface/jinja on real chat templates: test_chat_template_parity.cpp.
#include "text/chat_template.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <fstream>
#include <unistd.h>

#include <string>

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

// Depth a template or its data could make unbounded is an error, not a stack overflow: chains
// of operators, attributes and filters (each a tree level without a recursive parse; 20,000
// terms crashed the evaluation), and JSON data nested past 512 levels (a dataset line of 100,000
// nested lists crashed the conversion).
TEST(ChatTemplateErrors, UnboundedDepthIsAnErrorNotACrash) {
  std::string sum = "{{ 1";
  for (int i = 0; i < 20000; ++i) sum += "+1";
  EXPECT_NE(input_error_of([&] { ChatTemplate(sum + " }}", kOrigin); }).find("template nests too deeply"),
            std::string::npos);
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 20000; ++i) filters += "|trim";
  EXPECT_NE(input_error_of([&] { ChatTemplate(filters + " }}", kOrigin); }).find("template nests too deeply"),
            std::string::npos);
  std::string attributes = "{{ messages";
  for (int i = 0; i < 20000; ++i) attributes += ".a";
  EXPECT_NE(input_error_of([&] { ChatTemplate(attributes + " }}", kOrigin); }).find("template nests too deeply"),
            std::string::npos);
  // Chains nested in parentheses: each chain within the parser's bound, the tree 3,600 deep.
  std::string nested = "{{ " + std::string(60, '(') + "1";
  for (int i = 0; i < 60; ++i) nested += "+1";
  for (int level = 0; level < 60; ++level) {
    nested += ")";
    for (int i = 0; i < 60; ++i) nested += "+1";
  }
  nested += " }}";
  EXPECT_NE(input_error_of([&] { render(nested); }).find("expression nests too deeply"), std::string::npos);
  // Real templates' chains stay far below the bound.
  EXPECT_EQ(render("{{ 1+1+1+1+1+1+1+1 }}|{{ ' a '|trim|upper|lower }}|{{ 'x' if false else 'y' if false else 'z' }}"),
            "8|a|z");
  // (Built and handed over by moves: a copy of JSON this deep recurses too; data files' lines
  // are refused past the same depth as they are parsed, io/bounded_json.hpp.)
  nlohmann::ordered_json deep = "leaf";
  for (int i = 0; i < 1000; ++i) {
    nlohmann::ordered_json outer = nlohmann::ordered_json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  nlohmann::ordered_json message = {{"role", "user"}};
  message["content"] = std::move(deep);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back(std::move(message));
  const std::string error =
      input_error_of([&] { ChatTemplate("{{ messages }}", kOrigin).render(messages, false); });
  EXPECT_NE(error.find("nested deeper than 512 levels"), std::string::npos) << error;
}

// A loop's iteration scopes are released as it goes (every one was kept until the render
// ended: two nested loops of 1,000 took 3.4 GB), except where a macro made in an iteration may
// still be called after it.
// In a process whose address space may grow by 512 MiB at most (what it holds now, read from
// /proc, plus that), a million loop iterations; exits 0 where they render.
[[noreturn]] void render_a_million_iterations_within_512_mib() {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{512} << 20);
  rlimit limit{};
  limit.rlim_cur = limit.rlim_max = cap;
  setrlimit(RLIMIT_AS, &limit);
  const std::string out = render("{% set ns = namespace(n=0) %}{% for i in range(1000) %}{% for j in range(1000) %}"
                                 "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}");
  std::_Exit(out == "1000000" ? 0 : 3);
}

TEST(ChatTemplateRender, LoopScopesAreReleasedAsTheLoopGoes) {
  // In a child: a million iterations that kept their scopes needed 3.4 GB and fail there.
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(render_a_million_iterations_within_512_mib(), ::testing::ExitedWithCode(0), "");
  // A macro made in an iteration and kept in a namespace is called after the loop.
  EXPECT_EQ(render("{% set ns = namespace(m=none) %}{% for p in ['a', 'b'] %}{% macro m(x) %}{{ p }}{{ x }}"
                   "{% endmacro %}{% set ns.m = m %}{% endfor %}{{ ns.m('!') }}"),
            "b!");
}

}  // namespace
}  // namespace shardrl
