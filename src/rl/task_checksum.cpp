#include "rl/task_checksum.hpp"

#include "core/input_file.hpp"
#include "io/field_crc.hpp"

namespace shardrl {

std::int64_t task_checksum(const Task& task) {
  const std::vector<Task::InputFile> files = task.input_files();
  if (files.empty()) return -1;
  FieldCrc crc;
  for (const Task::InputFile& f : files) {
    crc.add(f.role);
    crc.add(read_input_file(f.path, f.role));
  }
  return crc.value();
}

}  // namespace shardrl
