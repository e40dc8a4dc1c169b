// SHARDRL_HOST_DEVICE: a function of the plain headers that both the Kokkos kernels and the
// CUDA-only sources (*.cu, no Kokkos) call, so that they compute the same bits.
#pragma once

// Kokkos code includes this after Kokkos (kernels/attention_decode.hpp, kernels/swiglu.hpp): its
// own marker, for whichever backend; the CUDA-only sources have no Kokkos and mark it for nvcc
// themselves.
#if defined(KOKKOS_INLINE_FUNCTION)
#define SHARDRL_HOST_DEVICE KOKKOS_INLINE_FUNCTION
#elif defined(__CUDACC__)
#define SHARDRL_HOST_DEVICE __host__ __device__ inline
#else
#define SHARDRL_HOST_DEVICE inline
#endif
