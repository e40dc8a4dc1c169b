// The memory a job will need, computed from the Config before anything is allocated, so that a
// shape or batch that cannot fit is refused with the numbers (an InputError on every rank)
// instead of ending in std::bad_alloc, an out-of-memory kill, or minutes of building a batch
// that never fits.
//
// The plan is a lower bound: the dominant terms of docs/memory.md (the sharded state, the larger
// of the two phases' transient buffers, the buffers outside the arena) and the host memory of the
// batches, each with the keys that size it. A job whose plan exceeds what its rank can get will
// fail, so refusing it is never wrong; tests/test_memory_plan.cpp checks the plan against the
// memory ledger of real jobs (at most what they count, and most of it).
//
// Computed in double: the keys are 64-bit and their products overflow any integer type.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "config/config.hpp"

namespace shardrl {

struct MemoryTerm {
  std::string what;   // the buffers and the keys that size them
  double bytes = 0;
};

struct MemoryPlan {
  std::vector<MemoryTerm> device;   // per rank, what the memory ledger will count
  std::vector<MemoryTerm> host;     // per rank, host memory outside the ledger (the batches)
  // The device terms by where they live: the sharded state and the buffers outside the arena,
  // then each phase's transient buffers; the arena holds the larger phase, which `device` has.
  std::vector<MemoryTerm> persistent, train, rollout;
  double device_bytes() const;
  double host_bytes() const;
};

// The bytes of a list of terms.
double bytes_of(const std::vector<MemoryTerm>& terms);

// `shardrl generate`'s generator: `rows` rows (--n) of `len` positions (the prompt and
// rollout.max_new_tokens), with its weight set, allocated outside the arena beside the train
// phase's buffers (app/generate_command.cpp). No rows: none.
struct GenerateShape {
  int rows = 0;
  int len = 0;
};

// `rl_loop`: the train command's rollout buffers and batches are planned too. For this build,
// or (`gpu_build`) for a GPU build wherever it is computed (`shardrl plan --gpu-memory` on a
// login node): cuBLAS's fixed GEMM workspace instead of the CPU's bf16 conversion buffers, and
// the flash attention kernels where model.attention = "auto" would take them.
MemoryPlan plan_memory(const Config& config, int world_size, bool rl_loop);
// `trains`: false for a policy that is only sampled (`evaluate`, `generate`; FsdpOptions::trains):
// no gradients, Adam moments or gradient buffers.
MemoryPlan plan_memory(const Config& config, int world_size, bool rl_loop, bool gpu_build,
                       GenerateShape generate = {}, bool trains = true);

// What this rank can get, and how many ranks of the job share its host's memory.
struct MemoryCapacity {
  double device_bytes = 0;   // free device memory (CPU builds: the host's, shared below)
  double host_bytes = 0;     // available host memory (MemAvailable, within a cgroup's limit)
  int ranks_on_host = 1;
  bool device_is_host = true;   // a CPU build: the ledger's buffers are host memory
};

// Empty when the plan fits, else a message with the plan's largest terms and the capacity.
std::string memory_plan_problem(const MemoryPlan& plan, const MemoryCapacity& capacity);

// Plans the job's memory and refuses it on every rank (InputError, the message of the lowest
// rank that cannot fit) when any rank cannot. Collective over `comm`.
void check_memory_plan(const Config& config, bool rl_loop, MPI_Comm comm, GenerateShape generate = {},
                       bool trains = true);

}  // namespace shardrl
