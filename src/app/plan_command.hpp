// `shardrl plan --config X.toml --ranks N [--gpu-memory 80GiB]`: the job's memory plan
// (job/memory_plan.hpp) per rank, by where it lives (the sharded state and the buffers outside
// the arena, then each phase's transient buffers: the arena holds the larger), without
// allocating anything, and whether it fits the given memory: the check every rank of the job
// makes at start-up, for a machine that is not this one. One process. Exit 0 when it fits, 1
// when it does not, 2 for a bad config or command line.
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct PlanArgs {
  std::string config_path;
  std::vector<std::string> overrides;   // "section.key=value"
  int ranks = 1;
  int ranks_per_node = 0;      // 0: all of them on one node (what shares a host's memory)
  std::string gpu_memory;      // per GPU, e.g. "80GiB", "141GB"; "": the job's device is this host's memory
  std::string host_memory;     // per node; "": this host's available memory
};

int run_plan(const PlanArgs& args);

// Bytes of a size such as "80GiB", "141GB", "512MiB" or "2TB" (a bare number: GiB); throws
// InputError naming `flag` for anything else.
double parse_memory_size(const std::string& text, const std::string& flag);

}  // namespace shardrl
