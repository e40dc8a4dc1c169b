// The NCCL check macro (GPU builds and the CUDA compile check only).
#pragma once

#include <nccl.h>

namespace shardrl {
[[noreturn]] void fail_nccl(ncclResult_t status, const char* call, const char* file, int line);
}

#define SHARDRL_CHECK_NCCL(call)                                                  \
  do {                                                                            \
    ncclResult_t shardrl_nccl_status_ = (call);                                   \
    if (shardrl_nccl_status_ != ncclSuccess)                                      \
      ::shardrl::fail_nccl(shardrl_nccl_status_, #call, __FILE__, __LINE__);      \
  } while (0)
