#include "rl/task_checksum.hpp"

#include "core/input_file.hpp"
#include "io/field_crc.hpp"

namespace shardrl {

namespace {
std::int64_t files_checksum(const std::vector<Task::InputFile>& files) {
  if (files.empty()) return -1;
  FieldCrc crc;
  for (const Task::InputFile& f : files) {
    crc.add(f.role);
    crc.add(read_input_file(f.path, f.role));
  }
  return crc.value();
}
}  // namespace

std::int64_t task_checksum(const Task& task) { return files_checksum(task.input_files()); }

std::int64_t eval_checksum(const Task& task) { return files_checksum(task.eval_files()); }

}  // namespace shardrl
