// How much memory this process can still get, read before a job allocates (job/memory_plan.hpp).
#pragma once

#include <string>

namespace shardrl {

// Free bytes of this rank's GPU (cudaMemGetInfo); a CPU build has no device memory of its own
// and returns host_available_bytes().
double device_free_bytes();
// Bytes the host can still give: MemAvailable from /proc/meminfo, or less when the process's
// cgroup or one above it (a Slurm job's memory limit) has less room left.
double host_available_bytes();
// The least room left (limit - usage) of the memory cgroups that hold this process, cgroup v2
// (memory.max) or v1 (memory.limit_in_bytes), each with its ancestors: -1 when none has a limit.
// `proc_self_cgroup` is /proc/self/cgroup's text; `cgroup_mount` is /sys/fs/cgroup.
double cgroup_memory_room(const std::string& proc_self_cgroup, const std::string& cgroup_mount);
// True in CUDA builds, where the two functions above measure different memories.
bool device_memory_is_separate();

}  // namespace shardrl
