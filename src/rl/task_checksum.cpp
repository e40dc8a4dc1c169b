#include "rl/task_checksum.hpp"

#include <zlib.h>

#include <algorithm>
#include <string>

#include "core/input_file.hpp"

namespace shardrl {
namespace {

void add(uLong& crc, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {   // zlib's length is a uInt
    const uInt n = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
}

// A field after its length (8 bytes little-endian), so that no two different lists of files give
// the same bytes.
void add_field(uLong& crc, const std::string& s) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(s.size()) >> (8 * i));
  add(crc, le, sizeof le);
  add(crc, s.data(), s.size());
}

}  // namespace

std::int64_t task_checksum(const Task& task) {
  const std::vector<Task::InputFile> files = task.input_files();
  if (files.empty()) return -1;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const Task::InputFile& f : files) {
    add_field(crc, f.role);
    add_field(crc, read_input_file(f.path, f.role.c_str()));
  }
  return static_cast<std::int64_t>(crc);
}

}  // namespace shardrl
