// Renders a parsed Jinja template: statements, expressions, scopes and macros with Jinja 3.1's
// semantics — a for loop's body gets a fresh scope on every iteration (so `set` inside a loop
// does not leak out of it, which is why templates use namespace()), `if` opens no scope, a macro
// runs in a scope under the one it was defined in.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/jinja_parser.hpp"
#include "text/jinja_value.hpp"

namespace shardrl::jinja {

// The text `program` renders to with `variables` as the template's globals (over Jinja's and
// transformers' global functions). Any error is an InputError naming origin and line:column.
std::string render_program(const Program& program, const std::string& origin,
                           std::vector<std::pair<std::string, Value>> variables);

}  // namespace shardrl::jinja
