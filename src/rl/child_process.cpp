#include "rl/child_process.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/child_groups.hpp"

namespace shardrl {

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    signal_group(SIGKILL);
    reap();
  }
}

void ChildProcess::adopt(pid_t pid) {
  pid_ = pid;
  note_child_group(pid);
}

void ChildProcess::signal_group(int signal) {
  if (pid_ > 0 && !reaped_) ::kill(-pid_, signal);
}

bool ChildProcess::wait_exit(std::chrono::steady_clock::duration limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (poll_exit()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::end_group_and_reap() {
  signal_group(SIGKILL);
  reap();
}

std::string ChildProcess::exit_description() const {
  if (!exited_) return "is still running";
  if (!status_known_) return "exited (status unknown: reaped elsewhere)";
  if (code_ == CLD_EXITED) return fmt::format("exited with status {}", status_);
  if (code_ == CLD_KILLED || code_ == CLD_DUMPED)
    return fmt::format("was killed by signal {} ({})", status_, ::strsignal(status_));
  return "ended";
}

bool ChildProcess::poll_exit() {
  if (exited_) return true;
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
      if (info.si_pid != pid_) return false;   // still running
      exited_ = status_known_ = true;
      code_ = info.si_code;
      status_ = info.si_status;
      return true;
    }
    if (errno == EINTR) continue;
    // ECHILD: the job ignores SIGCHLD (children reap themselves) or someone else waited.
    exited_ = reaped_ = true;
    forget_child_group(pid_);
    return true;
  }
}

void ChildProcess::reap() {
  while (!reaped_) {
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, 0);
    if (got == pid_ || (got < 0 && errno != EINTR)) {
      reaped_ = true;
      forget_child_group(pid_);
    }
    if (got == pid_ && !status_known_) {
      exited_ = status_known_ = true;
      code_ = WIFEXITED(status) ? CLD_EXITED : CLD_KILLED;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
    }
  }
}

}  // namespace shardrl
