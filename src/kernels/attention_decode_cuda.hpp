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

#include <cstddef>
#include <cstdint>

#include "kernels/cache_shape.hpp"

namespace shardrl {
struct bf16;   // core/bf16.hpp; only pointers here
}

namespace shardrl::kernels {

// Splitting long caches over their positions (flash-decoding). A CTA per (row, KV head, chunk of
// query heads) streams a row's cache; with few rows that is a few CTAs for 132 SMs (at batch 1,
// 8: 7% of the bandwidth bound at 16 384 positions). So with a workspace, steps of up to
// kDecodeSplitMaxRows rows split each row's positions into ranges of kDecodeSplitPositions,
// doubled until at most kDecodeSplitMaxRanges cover the row, one CTA each, and the CTA that
// finishes a row's last range merges them in range order (no second launch). In steps of up to
// kDecodeFewRows rows, rows longer than kDecodeSplitPositions start from ranges of
// kDecodeFewRowsSplitPositions instead. The ranges depend on the row's length and on which of
// those row classes its step is in, and the thresholds are powers of two, on which eager steps
// and the decode graphs' power-of-two buckets agree: a row's result does not depend on the grid,
// the cache's capacity, whether its step was captured, or its step's other rows within a class.
// A row of up to kDecodeSplitPositions positions is one range, bit for bit the unsplit kernel's.
// Past kDecodeSplitMaxRows rows the unsplit grid fills the GPU, and the ranges' merges cost more
// than they win (measured on an H100: 5-16% slower at 256 rows of 512-576 positions).
//
// Why finer ranges for long rows at up to 4 rows: a range's positions are read tile after tile
// (32 or 64 positions), each a trip to memory, and at a few rows the ranges' CTAs are all the GPU
// runs. On an H200 (qwen3-0.6b, 1 024-token prompts, bench_decode) decode steps went from 1.13 to
// 0.94 ms at batch 1, 1.27 to 1.07 at 2 and 1.62 to 1.43 at 4. Ranges of 64 for every step were
// slower at batch 16 (2.04 -> 2.35 ms: its 128 (row, KV head) pairs already fill the GPU, and its
// merges read 4x the ranges), and rows of at most 160 positions gained nothing from them. At 4
// rows and fewer the decode products' results do not depend on the step's other rows either
// (decode_gemv_cuda.hpp).
constexpr int kDecodeSplitPositions = 256;
constexpr int kDecodeFewRows = 4;
constexpr int kDecodeFewRowsSplitPositions = 64;
constexpr int kDecodeSplitMaxRanges = 32;
constexpr int kDecodeSplitMaxRows = 16;

// The split's device workspace (sizes: attention_decode_cuda_split_sizes): the partials may hold
// anything before a launch; the counters must be zero before the first launch, and each launch
// leaves them zero.
struct DecodeSplitWorkspace {
  float* partials = nullptr;
  std::uint32_t* arrivals = nullptr;
};

// True when attention_decode_cuda takes this shape: head dim 64 or 128, any GQA group.
inline bool attention_decode_cuda_supports(const CacheShape& s) {
  return (s.hd == 64 || s.hd == 128) && s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0;
}

// The split workspace's elements for steps of up to s.rows rows; none for shapes the kernel does
// not take. Inline, so that the memory plan (job/memory_plan.cpp) counts what GPU builds
// allocate on any build.
struct DecodeSplitSizes {
  std::size_t partials = 0;   // floats
  std::size_t arrivals = 0;   // counters
};
inline DecodeSplitSizes attention_decode_cuda_split_sizes(const CacheShape& s) {
  if (!attention_decode_cuda_supports(s)) return {};
  const std::size_t heads = static_cast<std::size_t>(s.rows < kDecodeSplitMaxRows ? s.rows : kDecodeSplitMaxRows) *
                            static_cast<std::size_t>(s.n_heads);
  return {heads * kDecodeSplitMaxRanges * (2 + s.hd), heads};
}

// The new token's head work (kernels/qk_rope_cache.hpp's qk_rope_cache_write) done by the
// attention's own CTAs (attention_decode_heads_cuda): each forms its query heads and, where it
// reads the row's last position, the new key and value, and one CTA of each (row, KV head)
// writes them into the cache. Why: at batch 1 that launch was 4.7 of a qwen3-0.6b layer's 37 us
// for a few hundred elements. Rows of q_raw start at r * q_stride, of k_raw and v at r * kv_stride
// (0: n_heads * hd and n_kv_heads * hd, buffers of their own).
struct DecodeHeads {
  const bf16* q_raw = nullptr;                           // (rows, n_heads, hd), strided
  const bf16* k_raw = nullptr;                           // (rows, n_kv_heads, hd), strided
  const bf16* v = nullptr;                               // (rows, n_kv_heads, hd), strided
  long q_stride = 0, kv_stride = 0;
  const bf16* q_norm = nullptr, *k_norm = nullptr;       // (hd) each, or both nullptr
  float eps = 0.0f;
  const float* table = nullptr;                          // rope_table's (rows, hd)
};

// out(r, h, :) = softmax_j(q(r,h,:) . k(entry(slot(r), j), g, :) / sqrt(hd)) v(...), j <= positions[r],
// with g = h / (n_heads / n_kv_heads) and slot(r) = slots ? slots[r] : r. `stream` is the
// cudaStream_t to launch on (the execution space's). Without a workspace every row is one range.
void attention_decode_cuda(void* stream, const CacheShape& s, const std::int32_t* slots,
                           const std::int32_t* positions,
                           const bf16* q,                           // (rows, n_heads, hd)
                           const bf16* k_cache, const bf16* v_cache,   // (entries, n_kv_heads, hd)
                           bf16* out,                               // (rows, n_heads, hd)
                           const DecodeSplitWorkspace& split = {});

// qk_rope_cache_write(heads...) then attention_decode_cuda, in one launch: the same math (the
// heads' sums of squares reduced in another order); the queries are formed in shared memory and
// not written out. For the shapes attention_decode_cuda_supports.
void attention_decode_heads_cuda(void* stream, const CacheShape& s, const std::int32_t* slots,
                                 const std::int32_t* positions, const DecodeHeads& heads,
                                 bf16* k_cache, bf16* v_cache,              // (entries, n_kv_heads, hd)
                                 bf16* out,                                 // (rows, n_heads, hd)
                                 const DecodeSplitWorkspace& split = {});

}  // namespace shardrl::kernels
