// A model's chat template (tokenizer_config.json's "chat_template") rendered in C++ the way
// transformers' apply_chat_template renders it: Jinja 3.1 in its immutable sandbox with
// trim_blocks and lstrip_blocks, transformers' tojson (json.dumps, ensure_ascii=False),
// raise_exception and strftime_now. A template is parsed once and rendered any number of times.
//
// Supported (the Jinja used by the Qwen2.5/Qwen3, Llama 2/3.x and Mistral templates, and more):
//   tags        {{ }}, {% %}, {# #}, whitespace control {%- -%} {{- -}} {#- -#} and `+`, {% raw %}
//   statements  if/elif/else, for (tuple targets, `if` filter, else, loop.index/index0/revindex/
//               revindex0/first/last/length/previtem/nextitem/cycle), break/continue, set (names,
//               tuples, ns.attr on namespace(), block set with filters), macro and calls of macros,
//               filter blocks, print, transformers' {% generation %}
//   expressions literals (str with Python escapes, int, float, true/True/..., none/None, lists,
//               dicts, tuples), .attr, [key], slices, + - * / // % **, ~, comparisons (chained),
//               and/or/not, in/not in, is [not] <test>, x if c else y
//   filters     abs capitalize count d default first float indent int items join last length list
//               lower map reject rejectattr replace reverse safe select selectattr string title
//               tojson trim upper
//   tests       defined undefined none boolean true false integer float number string mapping
//               iterable sequence callable sameas eq/equalto/== ne/!= lt/< le/<= gt/> ge/>= in
//               odd even divisibleby
//   methods     str: startswith endswith strip lstrip rstrip split rsplit splitlines lower upper
//               title capitalize replace removeprefix removesuffix find rfind count join;
//               dict: get items keys values
//   globals     range namespace dict raise_exception strftime_now
// Refused with an InputError naming origin, line:column and the construct: include, import, from,
// extends, block, with, call blocks, autoescape, recursive loops, *args/**kwargs, any other filter,
// test or method (list.append and other mutations: the sandbox is immutable), str % formatting and
// str.format, slicing a range(), printing a generator (Python would print its address).
//
// Values behave as the Python objects Jinja holds: Undefined is falsy and prints as "", None
// prints "None", True prints "True", lists print as Python lists, map/select/reverse give
// single-use generators, integers are 64-bit (overflow is an error, not a wrap).
// Where transformers would differ, one documented approximation remains: str case mappings
// (lower/upper/title/capitalize) are one-to-one (utf8proc), so the few characters whose Python
// mapping has several characters or depends on context differ ('ß'|upper is "ẞ", Python "SS";
// final sigma). Chat templates apply them to roles and ASCII, not to message text.
// Dict keys keep the order of the JSON they came from (nlohmann::ordered_json: a line's tools and
// tool-call arguments print in their own order, as Python's dicts keep it).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace shardrl {

namespace jinja {
struct Program;
}

// A chat template (tokenizer_config.json's "chat_template"), parsed once.
class ChatTemplate {
 public:
  // `origin` names where the source came from in error messages (e.g. "DIR/tokenizer_config.json: chat_template").
  // A construct outside the supported subset, or a syntax error, is an InputError (core/error.hpp) naming
  // origin, line:column and the construct.
  ChatTemplate(std::string source, std::string origin);
  // messages: a JSON array of objects {"role":..., "content":..., maybe more}. `variables` adds/overrides
  // template variables (bos_token, eos_token, enable_thinking, tools, ...). add_generation_prompt is passed
  // as the variable of that name. An error raised while rendering (raise_exception(), a type error) is an
  // InputError with origin and line:column.
  // As in transformers, `tools` and `documents` are None unless `variables` sets them; `variables`
  // may not set `messages` or `add_generation_prompt` (an InputError).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) const;

  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::shared_ptr<const jinja::Program> program_;  // immutable: renders may run concurrently
};

}  // namespace shardrl
