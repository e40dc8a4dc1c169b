#include "core/child_groups.hpp"

#include <signal.h>

#include <atomic>

namespace shardrl {
namespace {

std::atomic<pid_t> g_groups[kMaxChildGroups] = {};   // 0: a free slot

}  // namespace

bool note_child_group(pid_t group) {
  for (auto& slot : g_groups) {
    pid_t free = 0;
    if (slot.compare_exchange_strong(free, group)) return true;
  }
  return false;
}

void forget_child_group(pid_t group) {
  for (auto& slot : g_groups) {
    pid_t expected = group;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void kill_child_groups() {
  for (auto& slot : g_groups)
    if (const pid_t group = slot.load(); group > 0) ::kill(-group, SIGKILL);
}

}  // namespace shardrl
