// A layer's causal attention for training and prefill, by the model's AttentionImpl: the batched
// GEMMs of model/gemm_attention.hpp or the tensor-core flash kernels of
// kernels/flash_attention.hpp. The one place that picks, so that forward, its recompute in
// backward, prefill and backward cannot take different paths. Both write the same out and lse
// (the lse convention of kernels/attention.hpp), so backward reads forward's either way.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attention_impl.hpp"
#include "model/gemm_attention.hpp"

namespace shardrl {

// The scratch of the model's implementation; the other one's stays null (not allocated).
struct AttentionScratch {
  AttentionWorkspace gemm;   // gemm: one (row, kv head) block (attention_workspace_bytes)
  float* delta = nullptr;    // flash, training: (B*S, n_heads), flash_attention_backward_workspace_bytes
};

// flash with T = float is a check failure: the kernels are bf16 only, and the config refuses
// model.attention = "flash" with model.precision = "fp32".
template <class T>
void attention_forward(AttentionImpl impl, const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& shape,
                       const std::int32_t* positions, const T* q, const T* k, const T* v, T* out, float* lse,
                       const AttentionScratch& scratch);

// dq, dk, dv written (not accumulated), as both implementations do.
template <class T>
void attention_backward(AttentionImpl impl, const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& shape,
                        const std::int32_t* positions, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const T* dout, T* dq, T* dk, T* dv, const AttentionScratch& scratch);

}  // namespace shardrl
