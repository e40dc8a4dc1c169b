// UTF-8 at the tokenizer's edges: text from a file or the command line may hold any bytes, while
// every stage after it (normalizers, the pre-tokenizer regexes, the vocabulary) works on valid
// UTF-8. Invalid input is repaired the way Rust's String::from_utf8_lossy and the WHATWG decoder
// do it (each maximal ill-formed subpart becomes one U+FFFD), which is what Hugging Face's
// tokenizers see when a caller hands them such bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shardrl::text {

// `bytes` with every maximal ill-formed subsequence replaced by U+FFFD (EF BF BD).
std::string to_valid_utf8(std::string_view bytes);

// Bytes in the UTF-8 sequence starting with `lead` (1 for a continuation or invalid byte, so that
// iteration over valid UTF-8 always advances).
inline std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

// Unicode's White_Space property (Rust's char::is_whitespace), from utf8proc's data.
bool is_whitespace(char32_t c);

// True when every byte is ASCII: such text is its own NFC form and needs no repair.
bool is_ascii(std::string_view text);

}  // namespace shardrl::text
