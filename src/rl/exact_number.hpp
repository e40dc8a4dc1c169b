// The exact value of a final answer that is one number (rl/math_answer.hpp lists the forms:
// integers, decimals, `1e3`, `1.5\times10^{3}`, `a/b`, `\frac{a}{b}`, integer powers, mixed numbers
// `3\frac{1}{2}`, signed), as
// canonical text: "p" or "p/q" reduced in 128-bit integers with overflow checks, or for a decimal
// too large for that its shortest exact decimal. Host-only, no state.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardrl {

// The canonical text of `s` when it is one number, else nullopt.
std::optional<std::string> canonical_number(std::string_view s);

}  // namespace shardrl
