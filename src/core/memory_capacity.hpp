// How much memory this process can still get, read before a job allocates (job/memory_plan.hpp).
#pragma once

namespace shardrl {

// Free bytes of this rank's GPU (cudaMemGetInfo); a CPU build has no device memory of its own
// and returns host_available_bytes().
double device_free_bytes();
// Bytes the host can still give: MemAvailable from /proc/meminfo, or less when the process's
// cgroup (a Slurm job's memory limit) has less room left.
double host_available_bytes();
// True in CUDA builds, where the two functions above measure different memories.
bool device_memory_is_separate();

}  // namespace shardrl
