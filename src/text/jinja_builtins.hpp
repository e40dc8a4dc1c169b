// Jinja's built-in filters, tests and global functions, and Python's attribute and item access
// with the str and dict methods chat templates call — the subset listed in chat_template.hpp, each
// with the semantics Jinja 3.1 (as configured by transformers) gives it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja_value.hpp"

namespace shardrl::jinja {

// Whether a filter or test name is supported: the parser refuses every other one.
bool is_supported_filter(std::string_view name);
bool is_supported_test(std::string_view name);

// value | name(args). TemplateError on wrong arguments or types.
Value apply_filter(std::string_view name, const Value& subject, CallArgs& args);
// value is name(args).
bool apply_test(std::string_view name, const Value& subject, CallArgs& args);

// object.name as Jinja's sandbox resolves it: a method of str or dict, else the dict item or
// namespace attribute, else Undefined. TemplateError on an Undefined object or a Python method
// outside the subset.
Value get_attribute(const Value& object, const std::string& name);
// object[key]: the item, else (for a string key) the attribute, else Undefined.
Value get_item(const Value& object, const Value& key);
// object[start:stop:step] on a str, list or tuple; absent parts are None.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// The globals every template sees: range, namespace, dict, raise_exception and (as transformers
// adds it) strftime_now.
std::vector<std::pair<std::string, Value>> global_functions();

// Python's argument binding for a built-in: the values of parameters `names` from positional and
// keyword arguments; `defaults` covers the trailing parameters, the others are required.
// TemplateError for a missing, repeated or unknown argument.
struct ArgSpec {
  std::string_view function;
  std::vector<std::string_view> names;
};
std::vector<Value> bind_arguments(const ArgSpec& spec, CallArgs& args, std::vector<Value> defaults = {});

}  // namespace shardrl::jinja
