#include "blas/cublas_handle.hpp"

#include <string>

#include "blas/cublas_check.hpp"
#include "core/error.hpp"

namespace shardrl {

void fail_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  fatal(std::string(call) + " failed: " + cublasGetStatusName(status) + ": " + cublasGetStatusString(status),
        file, line);
}

CublasHandle::CublasHandle(cudaStream_t stream) {
  SHARDRL_CHECK_CUBLAS(cublasCreate(&handle_));
  SHARDRL_CHECK_CUBLAS(cublasSetStream(handle_, stream));
}

CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy(handle_);
}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_) cublasDestroy(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

}  // namespace shardrl
