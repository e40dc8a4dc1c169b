// Move-only owner of device memory taken with cudaMalloc rather than through Kokkos (GPU builds
// and the CUDA compile check only), counted in the memory ledger while it lives. For buffers of
// objects that may outlive the Kokkos runtime (a communicator kept for a whole test process),
// which a Kokkos allocation may not.
#pragma once

#include <cstddef>

#include "core/memory_ledger.hpp"

namespace shardrl {

class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(MemoryCategory category, std::size_t bytes);
  ~CudaBuffer();
  CudaBuffer(CudaBuffer&& other) noexcept;
  CudaBuffer& operator=(CudaBuffer&& other) noexcept;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release();

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryCategory category_ = MemoryCategory::workspace;
};

}  // namespace shardrl
