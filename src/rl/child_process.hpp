// A spawned child process that leads a process group of its own, so that signals also reach what
// it started (a `sh -c` wrapper, a worker pool). Its exit is observed without reaping it (waitid
// with WNOWAIT): until it is reaped its pid, the group's id, cannot be reused, so the group can
// still be signalled after the leader ended, and what the command started and left behind is
// ended with it. One owner per pid; destruction never leaves a zombie.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace shardrl {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();   // SIGKILL to the group, then reaps, unless reaped already

  // Takes `pid` (the group's leader), remembered until reaped (core/child_groups.hpp).
  void adopt(pid_t pid);
  bool exited() const { return exited_; }

  void signal_group(int signal);
  // Whether the leader has exited within `limit` (it stays unreaped).
  bool wait_exit(std::chrono::steady_clock::duration limit);
  // Ends whatever of the group is left and reaps the leader (waiting for it if it has not exited).
  void end_group_and_reap();

  // "exited with status 3", "was killed by signal 9 (Killed)", "is still running".
  std::string exit_description() const;

 private:
  bool poll_exit();
  void reap();

  pid_t pid_ = -1;
  bool exited_ = false, reaped_ = false, status_known_ = false;
  int code_ = 0, status_ = 0;
};

}  // namespace shardrl
