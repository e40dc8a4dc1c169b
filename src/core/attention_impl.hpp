// How a model computes training and prefill attention: batched GEMMs around a row softmax, one
// (row, kv head) block of S x S scores at a time (model/gemm_attention.hpp: every build and
// compute type, the reference), the tensor-core flash kernels that never materialise the
// scores (kernels/flash_attention.hpp: GPU builds, bf16, head_dim 64 or 128), or cuDNN's fused
// attention for training batches set without positions (right-padded rows), the flash kernels
// for the rest (batches with positions, prefill) (kernels/cudnn_attention.hpp: GPU builds with
// cuDNN).
#pragma once

namespace shardrl {

enum class AttentionImpl { gemm, flash, cudnn };

// No S x S scores in memory: the flash kernels, and cuDNN with them.
inline bool fused_attention(AttentionImpl impl) { return impl != AttentionImpl::gemm; }

}  // namespace shardrl
