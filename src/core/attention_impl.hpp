// How a model computes training and prefill attention: batched GEMMs around a row softmax, one
// (row, kv head) block of S x S scores at a time (model/gemm_attention.hpp: every build and
// compute type, the reference), or the tensor-core flash kernels that never materialise the
// scores (kernels/flash_attention.hpp: GPU builds, bf16, head_dim 64 or 128).
#pragma once

namespace shardrl {

enum class AttentionImpl { gemm, flash };

}  // namespace shardrl
