// A completion as one printable line: what `generate` prints, so that a terminal shows exactly
// the bytes the model drew and nothing else; and text quoted in a message, escaped as little.
#pragma once

#include <string>

namespace shardrl {

// Newlines as \\n, backslashes doubled, other control bytes and bytes that are not well-formed
// UTF-8 (RFC 3629: no overlong forms, surrogates or code points beyond U+10FFFF) as \\xNN;
// well-formed multi-byte characters are kept.
std::string printable_line(const std::string& text);

// Only the bytes that are not well-formed UTF-8 as \\xNN, the rest as it is: a message that
// quotes what the user typed (a --set argument in another encoding) shows it without writing
// stray bytes to the terminal.
std::string with_invalid_utf8_escaped(const std::string& text);

}  // namespace shardrl
