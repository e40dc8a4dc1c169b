// Move-only owner of a CUDA stream (GPU builds and the CUDA compile check only).
#pragma once

#include <cuda_runtime_api.h>

namespace shardrl {

class CudaStream {
 public:
  CudaStream();   // a non-blocking stream on the current device
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace shardrl
