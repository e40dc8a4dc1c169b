// Ordering work between streams without the host: a second stream for communication and
// events that one stream records and another waits on (DESIGN.md: the NCCL stream waits on a
// compute-stream event, never on the host). On CPU builds work is ordered by program order and
// these are no-ops.
#pragma once

#include "core/kokkos.hpp"
#include "core/live_handles.hpp"

namespace shardrl {

// A stream as the collectives see it (cudaStream_t on GPU builds; null on CPU builds).
using StreamHandle = void*;

// The stream of a Kokkos execution space instance.
inline StreamHandle stream_handle([[maybe_unused]] const ExecSpace& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  return space.cuda_stream();
#else
  return nullptr;
#endif
}

// A stream of its own for communication (move-only owner).
class SideStream {
 public:
  SideStream();
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  StreamHandle get() const { return stream_; }

 private:
  HandleCount counted_{HandleKind::stream};
  StreamHandle stream_ = nullptr;
};

// A point in one stream's work that another stream can wait for (move-only owner).
class DeviceEvent {
 public:
  DeviceEvent();
  ~DeviceEvent();
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;

  void record(StreamHandle stream);
  // Work enqueued on `stream` after this call starts after the recorded point.
  void wait(StreamHandle stream) const;

 private:
  HandleCount counted_{HandleKind::event};
  void* event_ = nullptr;
};

}  // namespace shardrl
