// GPT-2's byte-level alphabet, used by byte-level BPE (Qwen2/3, Llama 3): every byte is shown as
// one printable character, so that any byte string is a string of vocabulary characters. The
// mapping is GPT-2's rule (printable Latin-1 bytes stand for themselves, the other 68 take code
// points from U+0100 on, in byte order), computed, not tabled.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace shardrl::text {

// The character standing for each byte, as UTF-8.
const std::array<std::string, 256>& byte_level_chars();

// `bytes` written in the byte-level alphabet.
std::string to_byte_level(std::string_view bytes);

// The byte a byte-level character stands for, or -1 when `code_point` is none of them.
int byte_of_byte_level_char(char32_t code_point);

}  // namespace shardrl::text
