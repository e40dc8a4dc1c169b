#include "core/watchdog.hpp"

#include <algorithm>
#include <future>
#include <memory>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "core/child_groups.hpp"
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
    running_.restart();
    progressed_ = false;
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

void Watchdog::progress() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  running_.restart();
  progressed_ = true;
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      wake_.wait(lock);
      continue;
    }
    // Awake at least every second, so that a stop of the process shows as a gap in running_.
    const double left = seconds_ - running_.seconds();
    if (left > 0) {
      wake_.wait_for(lock, std::chrono::duration<double>(std::min(left, 1.0)));
      continue;
    }
    // No MPI from this thread (the main thread may hold MPI, blocked in the call that hangs):
    // print and leave; the launcher ends the other ranks when this one exits without finalising.
    // The cause first, before anything that may block.
    print_fatal(fmt::format("{} {} {} = {} s: a peer rank failed or is stuck{}", what_,
                            progressed_ ? "made no progress within" : "did not complete within", setting_, seconds_,
                            hint_));
    kill_child_groups();
    if (waiting_for_) {
      // What the phase waits for is read from the run's (shared) file system, whose hang may be
      // what this deadline caught: on a thread of its own, given a few seconds.
      auto detail = std::make_shared<std::promise<std::string>>();
      std::future<std::string> behind = detail->get_future();
      bool started = true;
      try {
        std::thread([detail, read = waiting_for_] {
          try {
            detail->set_value(read());
          } catch (...) {
            detail->set_value("");
          }
        }).detach();
      } catch (const std::exception&) {   // no thread to be had: the cause is printed already
        started = false;
      }
      if (started && behind.wait_for(std::chrono::seconds(3)) == std::future_status::ready)
        if (const std::string text = behind.get(); !text.empty()) {
          std::fputs(fmt::format("shardrl: {} waits for: {}\n", what_, text).c_str(), stderr);
          std::fflush(stderr);
        }
    }
    std::_Exit(kExitFatal);
  }
}

}  // namespace shardrl
