// A fingerprint of what a dataset task trains on: zlib's CRC-32 over every example it can draw
// (its prompt and answer as text and as ids, as the task renders and encodes them) and the ids
// that end a completion. A checkpoint records it (/data/task_checksum) and a resume compares it,
// so a run continued over another dataset, tokenizer, chat template or system prompt is refused
// even where every path is the same, and a copy of the same files elsewhere (a node's scratch)
// is not. The examples' sources ("path:line") are left out for that reason.
#pragma once

#include <cstdint>

#include "rl/task.hpp"

namespace shardrl {

// In [0, 2^32) for a dataset's task; -1 for a generated task (its examples follow from the seed
// and the config, which a resume compares key by key).
std::int64_t task_checksum(const Task& task);

}  // namespace shardrl
