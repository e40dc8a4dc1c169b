// Causal grouped-query self-attention for training and prefill, as batched GEMMs (cuBLAS tensor
// cores on GPUs, host BLAS on CPUs) around the row kernels of kernels/attention_softmax.hpp.
// Same inputs, outputs and masking rule as the fused kernels of kernels/attention.hpp; chosen
// over them by measurement (docs/performance.md, bench_attention).
//
// One block (row b of the batch, key/value head g) at a time: its scores are materialised as
// (group, S, S) fp32, its probabilities as (group, S, S) in the compute type (rounded like
// flash attention's before the product with V). The workspace therefore grows with S^2 per
// block, not per batch: 100 MiB for llama-1b at S = 2048.
#pragma once

#include <cstddef>
#include <cstdint>

#include "blas/gemm.hpp"
#include "kernels/attention.hpp"

namespace shardrl {

// Device scratch of one attention call; see attention_workspace_bytes for the sizes.
struct AttentionWorkspace {
  float* scores = nullptr;   // (group, S, S): scores, then their gradient in backward
  void* probs = nullptr;     // (group, S, S) compute type: probabilities, then the scores' gradient
  float* dk = nullptr;       // (group, S, hd): backward's fp32 key gradient of each of a group's heads
  float* dv = nullptr;       // (group, S, hd): the same for values
};

struct AttentionWorkspaceSizes {
  std::size_t scores = 0, probs = 0, dkv = 0;   // bytes of each buffer (dk and dv alike)
};
AttentionWorkspaceSizes attention_workspace_bytes(const kernels::AttentionShape& max_shape,
                                                  std::size_t compute_type_size, bool backward);

// Largest product, for Gemm::reserve (the host backend widens bf16 operands in a workspace).
void reserve_attention_gemms(Gemm& gemm, const kernels::AttentionShape& max_shape);

template <class T>
void gemm_attention_forward(const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& shape,
                       const std::int32_t* positions, const T* q, const T* k, const T* v, T* out, float* lse,
                       const AttentionWorkspace& ws);

template <class T>
void gemm_attention_backward(const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& shape,
                        const std::int32_t* positions, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const T* dout, T* dq, T* dk, T* dv, const AttentionWorkspace& ws);

}  // namespace shardrl
