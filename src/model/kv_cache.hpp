// The keys and values of every layer for the rows being generated, in the compute type:
// (rows, max_len, n_kv_heads, head_dim) per layer, allocated once (ledger: kv-cache), in the rollout phase's arena region if given one.
#pragma once

#include <vector>

#include "model/model_shape.hpp"
#include "core/ledger_view.hpp"

namespace shardrl {

class KvCache {
 public:
  KvCache(const ModelShape& shape, int rows, int max_len, std::size_t element_size, ArenaPlacement at = {});
  int rows() const { return rows_; }
  int max_len() const { return max_len_; }
  void* keys(int layer) const { return k_[layer].data(); }
  void* values(int layer) const { return v_[layer].data(); }

 private:
  int rows_, max_len_;
  std::vector<LedgerView<char>> k_, v_;
};

}  // namespace shardrl
