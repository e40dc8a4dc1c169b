// A decode step's head work and attention: the new token's heads normalised and rotated, its key
// and value written into the cache (kernels/qk_rope_cache.hpp), then its attention over the
// cache (kernels/attention_decode.hpp). On GPU builds, for bf16 and the shapes the CUDA kernel
// takes, one launch does both (attention_decode_heads_cuda: the head work's own launch was 4.7
// of a qwen3-0.6b layer's 37 us at batch 1); elsewhere, and with `one_launch` off (a benchmark's
// baseline), the two launches.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_decode_cuda.hpp"
#include "kernels/cache_shape.hpp"
#include "kernels/qk_rope_cache.hpp"

namespace shardrl::kernels {

// The arguments of qk_rope_cache_write and attention_decode; `q` holds the rotated queries only
// where two launches run (the one launch keeps them in shared memory).
template <class T>
void qk_rope_cache_attention_decode(const ExecSpace& space, const CacheShape& s, const std::int32_t* slots,
                                    const std::int32_t* positions,
                                    const T* q_raw, const T* k_raw, const T* v,   // (rows, heads, hd), strided
                                    const T* q_norm, const T* k_norm,             // (hd) each, or both nullptr
                                    float eps, const float* table,                // (rows, hd)
                                    T* q,                                         // (rows, n_heads, hd)
                                    T* k_cache, T* v_cache,                       // (entries, n_kv_heads, hd)
                                    long in_row_stride,
                                    T* out,                                       // (rows, n_heads, hd)
                                    const DecodeSplitWorkspace& split, bool one_launch = true) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<T, bf16>) {
    if (one_launch && attention_decode_cuda_supports(s) && (q_norm == nullptr) == (k_norm == nullptr)) {
      const DecodeHeads heads{q_raw, k_raw, v, in_row_stride, in_row_stride, q_norm, k_norm, eps, table};
      return attention_decode_heads_cuda(space.cuda_stream(), s, slots, positions, heads, k_cache, v_cache, out,
                                         split);
    }
  }
#endif
  (void)one_launch;
  qk_rope_cache_write(space, s, slots, positions, q_raw, k_raw, v, q_norm, k_norm, eps, table, q, k_cache, v_cache,
                      in_row_stride);
  attention_decode(space, s, slots, positions, q, k_cache, v_cache, out, split);
}

}  // namespace shardrl::kernels
