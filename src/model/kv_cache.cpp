#include "model/kv_cache.hpp"

namespace shardrl {

KvCache::KvCache(const ModelShape& s, int rows, int max_len, std::size_t element_size, ArenaPlacement at)
    : rows_(rows), max_len_(max_len) {
  const std::size_t bytes = std::size_t(rows) * max_len * s.n_kv_heads * s.head_dim * element_size;
  for (int l = 0; l < s.n_layers; ++l) {
    k_.emplace_back(at, MemoryCategory::kv_cache, "kv_cache_k", bytes);
    v_.emplace_back(at, MemoryCategory::kv_cache, "kv_cache_v", bytes);
  }
}

}  // namespace shardrl
