// A progress bar for a long phase that prints nothing else: a checkpoint's save or load, the
// start-up's loading of model.init_from, an evaluation. Shown on the terminal only: the app turns
// it on for rank 0 when its stdout is a terminal (a Slurm log gets its plain lines, no carriage
// returns), and a phase draws nothing until it has run for a while (most phases end first).
//   ProgressMeter meter("saving checkpoint", tensors);   // ... meter.advance(); per tensor
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace shardrl {

class ProgressMeter {
 public:
  // Draw bars from now on (rank 0 with a terminal), after a phase has run `after_s` seconds.
  static void enable(double after_s = 2.0);
  static bool enabled();
  // Called at every advance, on every rank, bar or no bar: the job's watchdog takes each as a sign
  // of progress (a long load is bounded tensor by tensor). One at a time; {} removes it.
  static void on_advance(std::function<void()> hook);

  ProgressMeter(std::string what, std::int64_t total);
  ~ProgressMeter();   // finishes the bar's line if one was drawn
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void advance(std::int64_t n = 1);

 private:
  std::string what_;
  std::int64_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace shardrl
