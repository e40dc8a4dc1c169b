// Time a process spent running, for deadlines that a suspended job must not count: Slurm's
// `scontrol suspend`, gang scheduling and suspend-preemption stop every process of the job
// (SIGSTOP) and continue it later, and a deadline on the wall clock then fires the moment the job
// runs again. Each reading adds the time since the last one, but at most kMaxRunningStep: a
// longer gap between two readings of a loop that reads far more often is the process stopped.
#pragma once

#include <algorithm>
#include <chrono>

namespace shardrl {

inline constexpr double kMaxRunningStep = 2.0;   // seconds

class RunningTime {
 public:
  RunningTime() : last_(std::chrono::steady_clock::now()) {}
  // Seconds of running since construction (or restart()), as of now.
  double seconds() {
    const auto now = std::chrono::steady_clock::now();
    elapsed_ += std::min(std::chrono::duration<double>(now - last_).count(), kMaxRunningStep);
    last_ = now;
    return elapsed_;
  }
  void restart() {
    last_ = std::chrono::steady_clock::now();
    elapsed_ = 0;
  }

 private:
  std::chrono::steady_clock::time_point last_;
  double elapsed_ = 0;
};

}  // namespace shardrl
