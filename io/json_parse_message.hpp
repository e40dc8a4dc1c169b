// The useful part of an nlohmann::json parse error for a message about one line of a JSON-lines
// file: its messages start with "[json.exception.parse_error.101] ", which helps nobody, and say
// "at line 1, column 7" about the one line parsed, which reads like a file line; keep only the
// column. (The metrics log and the jsonl task both report `file:line: <this>`.)
#pragma once

#include <string>

namespace shardrl {

inline std::string json_parse_message(const char* what) {
  std::string s(what);
  if (!s.empty() && s[0] == '[') {
    const std::size_t close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  const std::string line_one = "at line 1, column ";
  const std::size_t at = s.find(line_one);
  if (at != std::string::npos) s.replace(at, line_one.size(), "at column ");
  // Its "last read: '...'" quotes the input's bytes as they are: invalid UTF-8 or control bytes
  // would go into the log and the terminal raw. Escaped here as core/error's excerpt() does
  // (\xNN), not through it: the safetensors fuzz target builds io's header parser alone.
  std::string shown;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      shown += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      shown += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    }
  }
  return shown;
}

}  // namespace shardrl
