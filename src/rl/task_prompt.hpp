// The prompt forms of the generated tasks, written once: the tasks build their examples' prompts
// with them, and `shardrl generate --task-input` renders a user's input the same way (a shell
// argument cannot carry the newline every such prompt ends with).
#pragma once

#include <string>

namespace shardrl {

// The prompt task `task` gives for `input`: sort "3 1 9 2" -> "sort: 3 1 9 2\n", add "12+30" ->
// "add: 12+30=\n" (a trailing "=" in the input is not doubled), reverse "hello" ->
// "reverse: hello\n". InputError for the dataset tasks (jsonl, text), whose prompts are their
// dataset's, and for unknown tasks.
std::string task_prompt(const std::string& task, const std::string& input);

// Whether `task` has a prompt form, and an input for it to show in messages ("" if none).
bool has_prompt_form(const std::string& task);
std::string example_task_input(const std::string& task);

}  // namespace shardrl
