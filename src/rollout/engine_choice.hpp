// How the rollout generates (rollout.engine), a choice the config names.
//   static_batch: every row's prompt is prefilled, rows decode together until the last ends;
//                 the KV cache is rows x max_len, contiguous.
//   paged: a prompt is prefilled once for all its samples, which share its KV cache blocks; a
//          finished row's slot takes the next waiting sequence at once; the cache is a pool of
//          blocks taken as sequences grow (a sequence is recomputed later when the pool runs out).
#pragma once

#include <cstdint>

namespace shardrl {

enum class RolloutEngine { static_batch, paged };

struct EngineOptions {
  RolloutEngine engine = RolloutEngine::static_batch;
  int block_positions = 16;          // paged: positions per KV cache block (a power of two)
  std::int64_t kv_cache_tokens = 0;  // paged: positions the pool holds; 0: rows x max_len, as static
};

}  // namespace shardrl
