#include "rl/task_prompt.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {

bool has_prompt_form(const std::string& task) { return task == "sort" || task == "add" || task == "reverse"; }

std::string example_task_input(const std::string& task) {
  if (task == "sort") return "3 1 9 2";
  if (task == "add") return "12+30";
  if (task == "reverse") return "hello";
  return "";
}

std::string task_prompt(const std::string& task, const std::string& input) {
  if (task == "sort") return "sort: " + input + "\n";
  if (task == "reverse") return "reverse: " + input + "\n";
  if (task == "add") return "add: " + input + (!input.empty() && input.back() == '=' ? "" : "=") + "\n";
  if (task == "jsonl" || task == "text")
    throw InputError(fmt::format("task '{}' takes its prompts from its dataset, so it has no prompt form to render "
                                 "an input with: give the prompt itself with --prompt{}",
                                 task, task == "text" ? " (with --chat for the model's chat template)" : ""));
  throw InputError(fmt::format("unknown task '{}'", task));
}

}  // namespace shardrl
