#include "core/cuda_check.hpp"

#include <string>

#include "core/error.hpp"

namespace shardrl {
void fail_cuda(cudaError_t status, const char* call, const char* file, int line) {
  fatal(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
            cudaGetErrorString(status),
        file, line);
}
}  // namespace shardrl
