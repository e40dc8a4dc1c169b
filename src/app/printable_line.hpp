// A completion as one printable line: what `generate` prints, so that a terminal shows exactly
// the bytes the model drew and nothing else.
#pragma once

#include <string>

namespace shardrl {

// Newlines as \\n, backslashes doubled, other control bytes and bytes that are not well-formed
// UTF-8 (RFC 3629: no overlong forms, surrogates or code points beyond U+10FFFF) as \\xNN;
// well-formed multi-byte characters are kept.
std::string printable_line(const std::string& text);

}  // namespace shardrl
