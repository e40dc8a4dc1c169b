#include "core/device_stream.hpp"

#if defined(SHARDRL_ENABLE_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.hpp"
#endif

namespace shardrl {

#if defined(SHARDRL_ENABLE_CUDA)
SideStream::SideStream() {
  cudaStream_t s = nullptr;
  SHARDRL_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}
SideStream::~SideStream() {
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
DeviceEvent::DeviceEvent() {
  cudaEvent_t e = nullptr;
  SHARDRL_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}
DeviceEvent::~DeviceEvent() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}
void DeviceEvent::record(StreamHandle stream) {
  SHARDRL_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream)));
}
void DeviceEvent::wait(StreamHandle stream) const {
  SHARDRL_CHECK_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event_), 0));
}
#else
SideStream::SideStream() = default;
SideStream::~SideStream() = default;
DeviceEvent::DeviceEvent() = default;
DeviceEvent::~DeviceEvent() = default;
void DeviceEvent::record(StreamHandle) {}
void DeviceEvent::wait(StreamHandle) const {}
#endif

}  // namespace shardrl
