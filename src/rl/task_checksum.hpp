// A fingerprint of what a dataset task trains on: zlib's CRC-32 over the bytes of the files it is
// made of (Task::input_files: the dataset, and for the text task the tokenizer's and template's
// files), each after its role, not its path. A checkpoint records it (/data/task_checksum) and a
// resume compares it, so a run continued over an edited dataset or another tokenizer or template
// is refused even where every path is the same, and a copy of the same files elsewhere (a node's
// scratch) is not. The files, not the prompts as rendered: a template may date its prompts
// (strftime_now), and a resume on another day must not look like another dataset. What the
// config sets (rl.system_prompt, rl.max_prompt_tokens, ...) is compared key by key.
#pragma once

#include <cstdint>

#include "rl/task.hpp"

namespace shardrl {

// In [0, 2^32) for a dataset's task; -1 for a generated task (its examples follow from the seed
// and the config). A file that cannot be read: InputError naming it.
std::int64_t task_checksum(const Task& task);

// The same over the evaluation's files (Task::eval_files); -1 without an eval split.
std::int64_t eval_checksum(const Task& task);

}  // namespace shardrl
