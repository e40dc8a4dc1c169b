// A timeline of what each rank does, for `shardrl train --trace FILE`: named spans on the host
// clock (microseconds since the epoch, so ranks on one host line up), nested as they run. Off,
// a span costs a branch; on, a push and a pop of a small record. With `fence` (--profile too),
// each span's ends wait for the device, so a span covers its GPU work; otherwise it covers the
// host's enqueueing. On GPU builds every span is also an NVTX range of the same name, so Nsight
// Systems shows the same phases (whether or not the trace is on).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardrl {

struct TraceEvent {
  std::string name;
  double start_us = 0, duration_us = 0;
  int depth = 0;   // spans open around it
};

class Trace {
 public:
  // Starts recording (at most `capacity` spans; later ones are counted, not kept).
  static void enable(bool fence, std::size_t capacity = 1 << 20);
  static bool enabled();
  // The spans recorded so far, in the order they ended, and those left out; clears both.
  static std::vector<TraceEvent> take();
  static std::int64_t dropped();
};

// One span: `name`, or "name index" when index >= 0 (e.g. "forward unit 3").
class TraceSpan {
 public:
  explicit TraceSpan(const char* name, std::int64_t index = -1);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  bool recorded_ = false;
  bool nvtx_ = false;
};

}  // namespace shardrl
