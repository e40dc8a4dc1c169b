// zlib's CRC-32 of a sequence of fields, each after its length as 8 bytes little-endian, so that
// no two different sequences give the same bytes; an integer is its 8 bytes little-endian. What
// a checkpoint's metadata checksum and a task's files' checksum are made of
// (docs/checkpoint-format.md).
#pragma once

#include <cstdint>
#include <string_view>

namespace shardrl {

class FieldCrc {
 public:
  void add(std::string_view field);   // its length, then its bytes
  void add(std::int64_t value);       // 8 bytes little-endian
  std::int64_t value() const { return static_cast<std::int64_t>(crc_); }

 private:
  std::uint32_t crc_ = 0;
};

}  // namespace shardrl
