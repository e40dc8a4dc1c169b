// Where a KV cache keeps each sequence's positions, shared by the portable decode kernels
// (kernels/attention_decode.hpp) and the CUDA one (kernels/attention_decode_cuda.hpp). Plain
// C++: the CUDA-only source includes it without Kokkos.
#pragma once

#include <cstdint>

#include "kernels/host_device.hpp"

namespace shardrl::kernels {

// A step's rows and heads, and where the cache keeps each sequence's positions. Contiguous
// (block_table == nullptr): sequence s owns positions [s * max_len, s * max_len + max_len) of
// the cache. Paged: the cache is a pool of blocks of 2^block_shift positions, and position p of
// sequence s is at offset p mod 2^block_shift of block block_table[s * blocks_per_sequence +
// p >> block_shift], so sequences may share blocks (a prompt's, by its samples) and take blocks
// only as they grow.
struct CacheShape {
  int rows = 1;        // rows of this step (each the new token of one sequence)
  int max_len = 1;     // positions the cache holds per sequence
  int n_heads = 1;
  int n_kv_heads = 1;
  int hd = 1;
  const std::int32_t* block_table = nullptr;   // (sequences, blocks_per_sequence), or contiguous
  int blocks_per_sequence = 0;
  int block_shift = 0;

  // The cache entry (a position of the pool) of position `pos` of sequence `seq`.
  SHARDRL_HOST_DEVICE long entry(long seq, long pos) const {
    if (block_table == nullptr) return seq * max_len + pos;
    const long block = block_table[seq * blocks_per_sequence + (pos >> block_shift)];
    return (block << block_shift) + (pos & ((1L << block_shift) - 1));
  }
};

}  // namespace shardrl::kernels
