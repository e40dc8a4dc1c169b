// The process groups of the children this process started (rl/child_process.hpp) and has not
// reaped. Each child leads a group of its own, which the launcher's signals to this rank do not
// reach, and the paths that end the process without running destructors (fatal(), the
// watchdog's _Exit) would leave them running: those paths end them here first.
#pragma once

#include <sys/types.h>

namespace shardrl {

// Remembers `group` (a child's pid, its group's id) until forget_child_group. At most
// kMaxChildGroups at once; past that a group is not remembered (returns false).
inline constexpr int kMaxChildGroups = 64;
bool note_child_group(pid_t group);
void forget_child_group(pid_t group);

// SIGKILL to every remembered group. Takes no lock and allocates nothing, so any thread may call
// it while another is stopped anywhere.
void kill_child_groups();

}  // namespace shardrl
