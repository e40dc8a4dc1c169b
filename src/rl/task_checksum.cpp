#include "rl/task_checksum.hpp"

#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

namespace shardrl {
namespace {

// Each field with its length before it, so that no two different examples give the same bytes.
class Crc {
 public:
  void add(const void* data, std::uint64_t bytes) {
    const auto* p = static_cast<const Bytef*>(data);
    while (bytes > 0) {   // zlib's length is a uInt
      const uInt n = static_cast<uInt>(std::min<std::uint64_t>(bytes, 1u << 30));
      crc_ = crc32(crc_, p, n);
      p += n;
      bytes -= n;
    }
  }
  void add_length(std::uint64_t n) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    add(le, sizeof le);
  }
  void add(const std::string& s) {
    add_length(s.size());
    add(s.data(), s.size());
  }
  void add(const std::vector<std::int32_t>& ids) {
    add_length(ids.size());
    std::vector<unsigned char> le(ids.size() * 4);   // little-endian whatever the host's order
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (int b = 0; b < 4; ++b) le[4 * i + b] = static_cast<unsigned char>(static_cast<std::uint32_t>(ids[i]) >> (8 * b));
    add(le.data(), le.size());
  }
  std::int64_t value() const { return static_cast<std::int64_t>(crc_); }

 private:
  uLong crc_ = crc32(0L, Z_NULL, 0);
};

}  // namespace

std::int64_t task_checksum(const Task& task) {
  Crc crc;
  std::uint64_t examples = 0;
  task.for_each_dataset_example([&](const TaskExample& ex) {
    crc.add(ex.prompt);
    crc.add(ex.answer);
    crc.add(ex.demonstration);
    crc.add(ex.prompt_ids);
    crc.add(ex.answer_ids);
    ++examples;
  });
  if (examples == 0) return -1;
  crc.add_length(examples);
  crc.add(std::vector<std::int32_t>{task.eos_id()});
  crc.add(task.end_ids());
  return crc.value();
}

}  // namespace shardrl
