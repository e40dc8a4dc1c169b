// The CUDA runtime check macro (GPU builds and the CUDA compile check only).
#pragma once

#include <cuda_runtime_api.h>

namespace shardrl {
[[noreturn]] void fail_cuda(cudaError_t status, const char* call, const char* file, int line);
}

#define SHARDRL_CHECK_CUDA(call)                                                \
  do {                                                                          \
    cudaError_t shardrl_cuda_status_ = (call);                                  \
    if (shardrl_cuda_status_ != cudaSuccess)                                    \
      ::shardrl::fail_cuda(shardrl_cuda_status_, #call, __FILE__, __LINE__);    \
  } while (0)
