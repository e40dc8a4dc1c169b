#include "core/memory_capacity.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#if defined(SHARDRL_ENABLE_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.hpp"
#endif

namespace shardrl {
namespace {

// A number read from a one-line file such as cgroup v2's memory.max ("max" or missing: none).
double read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    return std::stod(word);
  } catch (const std::exception&) {
    return -1;
  }
}

// The cgroup v2 directory of this process ("0::/path" in /proc/self/cgroup), or "".
std::string own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

}  // namespace

double host_available_bytes() {
  double available = -1;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    double kib = 0;
    std::string unit;
    while (in >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        available = kib * 1024.0;
        break;
      }
  }
  if (available < 0) available = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  // Within a memory-limited cgroup (Slurm's task/cgroup), its room left is what counts.
  const std::string group = own_cgroup();
  if (!group.empty()) {
    const double limit = read_number(group + "/memory.max"), used = read_number(group + "/memory.current");
    if (limit > 0 && used >= 0) available = std::min(available, std::max(0.0, limit - used));
  }
  return available;
}

#if defined(SHARDRL_ENABLE_CUDA)
double device_free_bytes() {
  std::size_t free = 0, total = 0;
  SHARDRL_CHECK_CUDA(cudaMemGetInfo(&free, &total));
  return double(free);
}
bool device_memory_is_separate() { return true; }
#else
double device_free_bytes() { return host_available_bytes(); }
bool device_memory_is_separate() { return false; }
#endif

}  // namespace shardrl
