// make_task: validates TaskOptions and builds the named task (see task.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "rl/task_common.hpp"
#include "rl/task_difficulty.hpp"

namespace shardrl {
namespace {

void check_difficulty(const TaskOptions& o) {
  const DifficultyRange r = *difficulty_range(o.name);
  if (o.difficulty < r.min || o.difficulty > r.max)
    throw InputError(fmt::format("task '{}': difficulty {} is out of range (allowed {}..{})",
                                 o.name, o.difficulty, r.min, r.max));
  if (!o.dataset_path.empty())
    throw InputError(fmt::format("task '{}' takes no dataset path (got '{}'); only task 'jsonl' reads one",
                                 o.name, o.dataset_path));
}

}  // namespace

std::vector<std::string> task_names() { return {"sort", "add", "reverse", "jsonl", "text"}; }

std::unique_ptr<Task> make_task(const TaskOptions& o) {
  if (o.name == "sort") {
    check_difficulty(o);
    return task_detail::make_sort_task(o.difficulty, o.partial_credit);
  }
  if (o.name == "add") {
    check_difficulty(o);
    return task_detail::make_add_task(o.difficulty, o.partial_credit);
  }
  if (o.name == "reverse") {
    check_difficulty(o);
    return task_detail::make_reverse_task(o.difficulty, o.partial_credit);
  }
  if (o.name == "jsonl") {
    if (o.partial_credit)
      throw InputError("task 'jsonl' has no partial credit (exact-match reward only); turn partial credit off");
    if (o.dataset_path.empty()) throw InputError("task 'jsonl' needs a dataset path");
    return task_detail::make_jsonl_task(o.dataset_path, o.eos_id);
  }
  if (o.name == "text") {
    if (o.partial_credit)
      throw InputError("task 'text' has no partial credit (its reward is rl.reward's); turn partial credit off");
    if (o.dataset_path.empty()) throw InputError("task 'text' needs a dataset path");
    return task_detail::make_text_task(o);
  }
  throw InputError(fmt::format("unknown task '{}' (known tasks: {})", o.name,
                               fmt::join(task_names(), ", ")));
}

}  // namespace shardrl
