#include "core/cuda_stream.hpp"

#include "core/cuda_check.hpp"

namespace shardrl {

CudaStream::CudaStream() { SHARDRL_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);   // never throws; errors here are unrecoverable anyway
}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

}  // namespace shardrl
