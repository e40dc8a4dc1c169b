// A deadline for a phase of the job, watched by a thread of its own. Collectives poll their own
// timeouts, but on a GPU a host call may also block inside a library (an implicit device
// synchronisation waiting for a collective kernel whose peer died) where no poll runs; the
// watchdog still ends the job then, naming rank, host and the phase, and the launcher (mpirun,
// srun) takes the other ranks down.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/running_time.hpp"

namespace shardrl {

class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // From now on, `what` must finish within `seconds` of running (a suspended job's stop is not
  // counted: core/running_time.hpp), or this process exits with kExitFatal. Children it started
  // are ended with it (core/child_groups.hpp).
  // `waiting_for` (called from the watchdog's thread, never MPI) may name what the phase waits
  // for, e.g. the ranks that never entered it; its text is added to the message. `setting` is the
  // config key the seconds come from, named in the message.
  void arm(double seconds, std::string what, std::function<std::string()> waiting_for = {},
           std::string setting = "comm.timeout_s", std::string hint = "");
  void disarm();
  // A sign of progress in the phase armed: its deadline starts again, so a long phase of many
  // short steps (a rollout's decode steps, a train phase's micro-batches) is bounded step by step,
  // and the message then says the phase made no progress. Cheap: a lock, no system call.
  void progress();

 private:
  void watch();

  std::mutex mutex_;
  std::condition_variable wake_;
  bool armed_ = false, stop_ = false, progressed_ = false;
  double seconds_ = 0;
  RunningTime running_;   // since arm(): a suspended job's stop not counted
  std::string what_, setting_, hint_;   // hint: added to the message (what else may be the cause)
  std::function<std::string()> waiting_for_;
  std::thread thread_;
};

}  // namespace shardrl
