// A layer's causal attention for training and prefill, by the model's AttentionImpl: the batched
// GEMMs of model/gemm_attention.hpp, the tensor-core flash kernels of
// kernels/flash_attention.hpp, or cuDNN's fused attention (kernels/cudnn_attention.hpp) where
// the training batch was set without positions (right-padded rows) and cuDNN has an engine for
// the shape, the flash kernels otherwise. The one place that picks, so that forward, its
// recompute in backward, prefill and backward cannot take different paths: the pick depends
// only on the implementation, the shape and how the batch was set, which forward and backward
// share. gemm and flash
// write the same out and lse (the lse convention of kernels/attention.hpp); cuDNN writes its
// own lse layout, read only by its own backward.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attention_impl.hpp"
#include "model/gemm_attention.hpp"

namespace shardrl {

namespace kernels {
class CudnnAttention;
}

// The scratch of the model's implementation; the others' stay null (not allocated).
struct AttentionScratch {
  AttentionWorkspace gemm;   // gemm: one (row, kv head) block (attention_workspace_bytes)
  float* delta = nullptr;    // flash and cudnn, training: (B*S, n_heads), flash_attention_backward_workspace_bytes
  kernels::CudnnAttention* cudnn = nullptr;   // cudnn: the plans
  void* cudnn_workspace = nullptr;            // cudnn: the workspace of the largest batch's plans
  std::size_t cudnn_workspace_bytes = 0;
  bool single_sequence_rows = false;          // the batch was set without positions (Activations)
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
