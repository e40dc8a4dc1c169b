#include "io/field_crc.hpp"

#include "io/tensor_checksum.hpp"

namespace shardrl {

void FieldCrc::add(std::int64_t value) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(value) >> (8 * i));
  crc_ = crc32_bytes(crc_, le, sizeof le);
}

void FieldCrc::add(std::string_view field) {
  add(static_cast<std::int64_t>(field.size()));
  crc_ = crc32_bytes(crc_, reinterpret_cast<const unsigned char*>(field.data()), field.size());
}

}  // namespace shardrl
