#include "core/watchdog.hpp"

#include <algorithm>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace shardrl {

Watchdog::Watchdog() : thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::arm(double seconds, std::string what, std::function<std::string()> waiting_for, std::string setting,
                   std::string hint) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = true;
    seconds_ = seconds;
    // At most a century: comm.timeout_s = 1e10 ("never") in nanoseconds overflows the clock's
    // 64 bits, and the deadline came out in the past (the job stopped at its first watch).
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(std::min(seconds, 3.2e9)));
    what_ = std::move(what);
    setting_ = std::move(setting);
    hint_ = std::move(hint);
    waiting_for_ = std::move(waiting_for);
  }
  wake_.notify_all();
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      wake_.wait(lock);
      continue;
    }
    if (wake_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ && !stop_ &&
        std::chrono::steady_clock::now() >= deadline_) {
      // No MPI from this thread (the main thread may hold MPI, blocked in the call that hangs):
      // print and leave; the launcher ends the other ranks when this one exits without finalising.
      std::string msg = fmt::format(
          "shardrl: fatal error on {}: {} did not complete within {} = {} s: a peer rank failed or is stuck{}\n",
          origin_string(), what_, setting_, seconds_, hint_);
      if (waiting_for_)
        if (const std::string behind = waiting_for_(); !behind.empty())
          msg += fmt::format("shardrl: {} waits for: {}\n", what_, behind);
      flush_logging();   // the lines logged before, within a deadline (see fatal())
      std::fflush(stdout);
      std::fputs(msg.c_str(), stderr);
      std::fflush(stderr);
      std::_Exit(kExitFatal);
    }
  }
}

}  // namespace shardrl
