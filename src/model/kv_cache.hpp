// The keys and values of every layer for the sequences being generated, in the compute type,
// allocated once (ledger: kv-cache), in the rollout phase's arena region if given one.
// Contiguous: (sequences, max_len, n_kv_heads, head_dim) per layer, sequence s at row s. Paged: a
// pool of blocks of block_positions (a power of two) positions per layer, and a block table
// (sequences, ceil(max_len / block_positions)) saying which blocks hold each sequence's
// positions; the caller (the rollout's scheduler) fills the table on the host and uploads it
// before a step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kokkos.hpp"
#include "core/ledger_view.hpp"
#include "kernels/attention_decode.hpp"
#include "model/model_shape.hpp"

namespace shardrl {

class KvCache {
 public:
  // Contiguous: `rows` sequences of `max_len` positions.
  KvCache(const ModelShape& shape, int rows, int max_len, std::size_t element_size, ArenaPlacement at = {});
  struct Paged {
    int blocks = 1;            // blocks in the pool
    int block_positions = 16;  // positions per block, a power of two
    int sequences = 1;         // rows of the block table
  };
  // Paged: a pool of `paged.blocks` blocks; sequences of up to `max_len` positions.
  KvCache(const ModelShape& shape, const Paged& paged, int max_len, std::size_t element_size, ArenaPlacement at = {});

  int rows() const { return rows_; }          // sequences the cache addresses
  int max_len() const { return max_len_; }    // positions per sequence
  bool paged() const { return paged_; }
  int blocks() const { return blocks_; }
  int block_positions() const { return block_positions_; }
  int blocks_per_sequence() const { return blocks_per_sequence_; }
  void* keys(int layer) const { return k_[layer].data(); }
  void* values(int layer) const { return v_[layer].data(); }
  std::size_t bytes() const;   // keys and values of every layer

  // A step of `rows` rows through this cache, as the kernels take it.
  kernels::CacheShape step_shape(int rows) const;
  // The decode attention's workspace for splitting long caches (kernels/attention_decode.hpp),
  // for steps of up to rows() rows; empty where the portable kernel runs.
  kernels::DecodeSplitWorkspace decode_split() const { return {split_partials_.data(), split_arrivals_.data()}; }

  // Paged only: the host copy of the block table, (sequences, blocks_per_sequence). Every entry
  // must name a block the sequence may write: a prefill's padding positions and a decode
  // bucket's padding rows write through entries no real position reaches (the scheduler points
  // them at a scratch block). upload_table() copies it to the device on the model's stream
  // (before the step that reads it).
  std::int32_t* table(int sequence) { return table_h_.data() + std::size_t(sequence) * blocks_per_sequence_; }
  void upload_table(const ExecSpace& space);
  // Copies block `from` into block `to` for each (from, to), every layer, keys and values (the
  // samples' own copies of their prompts' last, partly filled blocks): one kernel per layer's
  // keys and values for all of them (a copy call per block, layer and pool took 56 calls per
  // joining sample of qwen3-0.6b). Sources and targets are distinct blocks; at most sequences()
  // copies at once.
  struct BlockCopy {
    int from, to;
  };
  void copy_blocks(const ExecSpace& space, const std::vector<BlockCopy>& copies);

 private:
  int rows_, max_len_;
  bool paged_ = false;
  int blocks_ = 0, block_positions_ = 0, block_shift_ = 0, blocks_per_sequence_ = 0;
  int n_heads_, n_kv_heads_, head_dim_;
  std::size_t element_size_;
  std::vector<LedgerView<char>> k_, v_;
  LedgerView<std::int32_t> table_;
  std::vector<std::int32_t> table_h_;
  LedgerView<std::int32_t> copies_;   // (from, to) pairs of copy_blocks, on the device
  LedgerView<float> split_partials_;            // in the cache's placement: written before read
  LedgerView<std::uint32_t> split_arrivals_;   // never in the arena: zero between launches
  void allocate_decode_split(ArenaPlacement at);
};

}  // namespace shardrl
