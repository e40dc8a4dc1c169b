// The cuBLAS check macro (GPU builds and the CUDA compile check only).
#pragma once

#include <cublas_v2.h>

namespace shardrl {
[[noreturn]] void fail_cublas(cublasStatus_t status, const char* call, const char* file, int line);
}

#define SHARDRL_CHECK_CUBLAS(call)                                                  \
  do {                                                                              \
    cublasStatus_t shardrl_cublas_status_ = (call);                                 \
    if (shardrl_cublas_status_ != CUBLAS_STATUS_SUCCESS)                            \
      ::shardrl::fail_cublas(shardrl_cublas_status_, #call, __FILE__, __LINE__);    \
  } while (0)
