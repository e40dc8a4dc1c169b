#include "text/byte_level.hpp"

#include <vector>

namespace shardrl::text {
namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::string utf8_of(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

struct Alphabet {
  std::array<std::string, 256> chars;
  std::vector<int> byte_of;   // indexed by code point, up to U+0143
  Alphabet() : byte_of(0x200, -1) {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = stands_for_itself(b) ? char32_t(b) : next++;
      chars[b] = utf8_of(cp);
      byte_of[cp] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() { return alphabet().chars; }

std::string to_byte_level(std::string_view bytes) {
  const auto& chars = alphabet().chars;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += chars[b];
  return out;
}

int byte_of_byte_level_char(char32_t code_point) {
  const auto& table = alphabet().byte_of;
  return code_point < table.size() ? table[code_point] : -1;
}

}  // namespace shardrl::text
