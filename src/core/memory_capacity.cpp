#include "core/memory_capacity.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
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

// The value of `key` in a memory.stat file ("key value" lines), or 0.
double stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  double value = 0;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

// The smaller of two rooms, -1 standing for none.
double tighter(double room, double other) {
  if (other < 0) return room;
  return room < 0 ? other : std::min(room, other);
}

// The least room left (limit - usage) of the cgroup at `path` under `mount` and of its
// ancestors, any of which may hold the limit (a Slurm job's step inside its job's cgroup); -1
// when none has one. Cgroup v1's "no limit" is a number near 2^63. The usage counts the page
// cache, whose inactive files the kernel reclaims before it fails an allocation: not used.
double room_up_the_tree(const std::string& mount, std::string path, const char* limit_file, const char* usage_file,
                        const char* inactive_file_key) {
  double room = -1;
  while (true) {
    const std::string dir = mount + path;
    const double limit = read_number(dir + "/" + limit_file), used = read_number(dir + "/" + usage_file);
    if (limit > 0 && limit < 0x1p60 && used >= 0) {
      const double reclaimable = std::min(used, stat_value(dir + "/memory.stat", inactive_file_key));
      const double left = std::max(0.0, limit - (used - reclaimable));
      room = tighter(room, left);
    }
    if (path.empty() || path == "/") break;
    path.erase(path.find_last_of('/'));
  }
  return room;
}


}  // namespace

double cgroup_memory_room(const std::string& proc_self_cgroup, const std::string& cgroup_mount) {
  double room = -1;
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; the path may hold ':' itself.
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      // Cgroup v2: at the mount itself, or under "unified" in the hybrid layout.
      std::error_code ec;
      const bool hybrid = !std::filesystem::exists(cgroup_mount + "/cgroup.controllers", ec) &&
                          std::filesystem::exists(cgroup_mount + "/unified", ec);
      const std::string mount = hybrid ? cgroup_mount + "/unified" : cgroup_mount;
      room = tighter(room, room_up_the_tree(mount, path, "memory.max", "memory.current", "inactive_file"));
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      room = tighter(room, room_up_the_tree(cgroup_mount + "/memory", path, "memory.limit_in_bytes",
                                            "memory.usage_in_bytes", "total_inactive_file"));
    }
  }
  return room;
}

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
  std::ifstream in("/proc/self/cgroup");
  const std::string groups((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const double room = cgroup_memory_room(groups, "/sys/fs/cgroup");
  return room >= 0 ? std::min(available, room) : available;
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
