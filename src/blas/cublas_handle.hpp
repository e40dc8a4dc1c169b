// Move-only owner of a cuBLAS handle bound to one stream (GPU builds and the CUDA compile check).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace shardrl {

class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(CublasHandle&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace shardrl
