// Work enqueued on a stream, recorded once and replayed as one launch (DESIGN.md invariant 3:
// nothing is allocated or re-pointed after capture, so the recorded addresses stay valid).
//
// GPU builds: CUDA stream capture of the stream, and of every stream the recorded work forks
// from it through events (the communication stream), instantiated as a graph. The recorded
// function runs once, at capture, with its kernels recorded rather than executed: host-side
// effects of it happen once. Capture is in relaxed mode because Kokkos' CUDA backend calls
// cudaMalloc(0) (no memory) at team launches, which global mode refuses.
//
// CPU builds have no graphs: replay() calls the recorded function again. That is for tests of
// the schedule around a graph only; the config refuses graphs on CPU builds.
#pragma once

#include <functional>

#include "core/device_stream.hpp"

namespace shardrl {

class CapturedGraph {
 public:
  // True where replay() launches a recorded graph (GPU builds), false where it re-runs the
  // recorded function.
  static bool native();

  CapturedGraph() = default;
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Records the work `body` enqueues on `stream` (fatal if a capture fails: something in it
  // synchronised with the host or allocated). Once per graph.
  void capture(StreamHandle stream, std::function<void()> body);
  // Enqueues the recorded work on `stream`.
  void replay(StreamHandle stream);
  bool captured() const { return captured_; }

 private:
  bool captured_ = false;
  void* graph_ = nullptr;   // cudaGraph_t
  void* exec_ = nullptr;    // cudaGraphExec_t
  std::function<void()> body_;   // CPU builds: what replay() runs
};

}  // namespace shardrl
