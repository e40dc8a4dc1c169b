// Programmatic dependent launch (Hopper, sm_90) for the decode step's CUDA kernels: a kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel
// before it on the stream still runs, once every CTA of that one has called allow_dependents()
// (or finished). It must call wait_for_prerequisites() before it reads anything an earlier
// kernel writes, and write nothing before it: the wait returns once the kernel before it has
// finished and its writes are visible, and that kernel waited in turn. A chain of such kernels
// may run all at once beside the last kernel launched ordinarily before them: what they read
// before their wait must not change from that kernel's start on. Both calls are no-ops where the
// launch did not ask for it; compiled for an architecture before sm_90 they are absent, so a
// launcher asks for it only of kernels compiled for sm_90 or later (dependent_launch_compiled).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/cuda_check.hpp"

namespace shardrl::kernels {

// Whether `kernel` as this device runs it was compiled from code for sm_90 or later (its PTX
// version: a binary JIT-compiled from older PTX lacks the instructions below), so that a
// dependent launch of it is safe.
inline bool dependent_launch_compiled(const void* kernel) {
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess && attributes.ptxVersion >= 90;
}

__device__ inline void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ inline void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(params), as a dependent launch where `early` (the
// kernel keeps the rule above and was compiled for it: dependent_launch_compiled).
template <class Params>
void launch_maybe_early(void (*kernel)(Params), bool early, dim3 grid, dim3 block, std::size_t shared_bytes,
                        cudaStream_t stream, const Params& params) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = early ? 1 : 0;
  SHARDRL_CHECK_CUDA(cudaLaunchKernelEx(&config, kernel, params));
}

}  // namespace shardrl::kernels
