// Programmatic dependent launch (Hopper, sm_90) for the decode step's CUDA kernels: a kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel
// before it on the stream still runs, once every CTA of that one has called allow_dependents()
// (or finished). It must call wait_for_prerequisites() before it reads anything an earlier
// kernel writes, and write nothing before it: the wait returns once the kernel before it has
// finished and its writes are visible, and that kernel waited in turn. Both are no-ops where the
// launch did not ask for it, and on GPUs before sm_90.
#pragma once

#include <cuda_runtime.h>

namespace shardrl::kernels {

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

}  // namespace shardrl::kernels
