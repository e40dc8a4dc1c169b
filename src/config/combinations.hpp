// Settings that are each valid but not together, or not on this build: load_config's checks of
// the whole config, once every key has parsed on its own.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/load.hpp"

namespace shardrl {

// Appends to out.errors each combination of out.config that this build cannot run, or whose keys
// would be ignored, naming the keys by their origins (out.origin).
void check_combinations(const BuildInfo& build, LoadedConfig& out);

// The keys a job with `c` does not read because another of its settings leaves them unread
// (rl.difficulty with a dataset task, the RoPE scaling keys without the factor, ...): their
// values change nothing the job computes.
std::vector<std::string> unread_keys(const Config& c);

}  // namespace shardrl
