// Causal grouped-query attention on tensor cores (GPU builds): FlashAttention-2 style, the
// scores of a query tile against one key tile at a time in registers with an online softmax, so
// nothing of size S x S ever reaches memory and one launch covers every row and head.
// Same inputs, outputs, masking rule (positions: right padding or packed sequences) and lse
// convention as kernels/attention.hpp; bf16 in and out, fp32 accumulation and softmax.
//
// Deterministic: no atomics. Backward runs three kernels: D = rowsum(dout * out) per (token,
// head); dK and dV per key tile (summing over the group's query heads and query tiles in a fixed
// order); dQ per query tile. The last recomputes the scores a second time (7 tile products in
// all instead of 5) so that dQ needs no atomic accumulation.
//
// This header is plain C++ (no Kokkos, no CUDA types): the kernels live in flash_attention.cu,
// compiled by nvcc; CPU builds have flash_attention_available() == false and throw if called.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention_shape.hpp"

namespace shardrl {
struct bf16;   // core/bf16.hpp; only pointers here, so the .cu needs no Kokkos
}

namespace shardrl::kernels {

// True when this build has the tensor-core kernels (a CUDA build).
bool flash_attention_available();

// True when the kernels take this head dimension (64 or 128). Any B, S, and heads with
// n_heads % n_kv_heads == 0.
bool flash_attention_supports_head_dim(int head_dim);

// Bytes of fp32 scratch backward needs: one value per (token, query head).
std::size_t flash_attention_backward_workspace_bytes(const AttentionShape& s);

// out (B*S, n_heads, hd), lse (B*S, n_heads): as kernels::attention_forward. `stream` is the
// cudaStream_t to launch on (the execution space's).
void flash_attention_forward(void* stream, const AttentionShape& s,
                             const std::int32_t* positions,   // (B*S)
                             const bf16* q,                   // (B*S, n_heads, hd)
                             const bf16* k,                   // (B*S, n_kv_heads, hd)
                             const bf16* v,                   // (B*S, n_kv_heads, hd)
                             bf16* out,                       // (B*S, n_heads, hd)
                             float* lse);                     // (B*S, n_heads)

// dq, dk, dv written (not accumulated). `delta` is the scratch of
// flash_attention_backward_workspace_bytes.
void flash_attention_backward(void* stream, const AttentionShape& s, const std::int32_t* positions,
                              const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                              const bf16* dout,   // (B*S, n_heads, hd)
                              bf16* dq,           // (B*S, n_heads, hd)
                              bf16* dk, bf16* dv, // (B*S, n_kv_heads, hd)
                              float* delta);      // (B*S, n_heads) scratch

}  // namespace shardrl::kernels
