// Decode attention on the GPU, memory-bound by design: one new token per row against that row's
// KV cache (contiguous or paged, kernels/cache_shape.hpp), the same math and result as
// kernels::attention_decode (to fp32 rounding: the positions are summed in another order).
//
// Why a CUDA-only kernel: in a rollout the decode step's time is the cache's bytes (at 128 rows
// of 1 024 positions, qwen3-0.6b, the portable kernel took 44 of a 47 ms step, about a tenth of
// the copy bandwidth). Here one CTA takes (row, KV head, a chunk of that head's query heads):
// each cache entry is read once for all the query heads that share it (GQA), in 16-byte loads,
// with several positions in flight per lane; each warp keeps an online softmax per sub-stream
// of positions (2 at head dim 128, 4 at 64), merged at the end through shared memory.
//
// Plain C++ (no Kokkos, no CUDA types): the kernel lives in attention_decode.cu, compiled by
// nvcc; kernels::attention_decode (attention_decode.hpp) takes it on GPU builds for bf16 and the
// head dims it takes, and attention_decode_portable otherwise.
#pragma once

#include <cstdint>

#include "kernels/cache_shape.hpp"

namespace shardrl {
struct bf16;   // core/bf16.hpp; only pointers here
}

namespace shardrl::kernels {

// True when attention_decode_cuda takes this shape: head dim 64 or 128, any GQA group.
bool attention_decode_cuda_supports(const CacheShape& s);

// out(r, h, :) = softmax_j(q(r,h,:) . k(entry(slot(r), j), g, :) / sqrt(hd)) v(...), j <= positions[r],
// with g = h / (n_heads / n_kv_heads) and slot(r) = slots ? slots[r] : r. `stream` is the
// cudaStream_t to launch on (the execution space's).
void attention_decode_cuda(void* stream, const CacheShape& s, const std::int32_t* slots,
                           const std::int32_t* positions,
                           const bf16* q,                           // (rows, n_heads, hd)
                           const bf16* k_cache, const bf16* v_cache,   // (entries, n_kv_heads, hd)
                           bf16* out);                              // (rows, n_heads, hd)

}  // namespace shardrl::kernels
