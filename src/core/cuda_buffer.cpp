#include "core/cuda_buffer.hpp"

#include <cuda_runtime_api.h>

#include <utility>

#include "core/cuda_check.hpp"

namespace shardrl {

CudaBuffer::CudaBuffer(MemoryCategory category, std::size_t bytes) : bytes_(bytes), category_(category) {
  SHARDRL_CHECK_CUDA(cudaMalloc(&data_, bytes));
  MemoryLedger::instance().add(category_, static_cast<std::int64_t>(bytes_));
}

CudaBuffer::~CudaBuffer() { release(); }

CudaBuffer::CudaBuffer(CudaBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), category_(other.category_) {}

CudaBuffer& CudaBuffer::operator=(CudaBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
  }
  return *this;
}

void CudaBuffer::release() {
  if (!data_) return;
  cudaFree(data_);   // never throws from a destructor; a failing free has nothing left to undo
  MemoryLedger::instance().add(category_, -static_cast<std::int64_t>(bytes_));
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace shardrl
