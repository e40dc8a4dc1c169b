// How the rollout generates (rollout.engine), a choice the config names.
//   static_batch: every row's prompt is prefilled, rows decode together until the last ends;
//                 the KV cache is rows x max_len, contiguous.
//   paged: a prompt is prefilled once for all its samples, which share its KV cache blocks; a
//          finished row's slot takes the next waiting sequence at once; the cache is a pool of
//          blocks taken as sequences grow (a sequence is recomputed later when the pool runs out).
#pragma once

#include <algorithm>
#include <cstdint>

namespace shardrl {

enum class RolloutEngine { static_batch, paged };

// A Generator built without options decodes statically: the reference the paged engine is
// tested against. A job's engine comes from rollout.engine (paged by default, job/options.cpp).
struct EngineOptions {
  RolloutEngine engine = RolloutEngine::static_batch;
  int block_positions = 16;          // paged: positions per KV cache block (a power of two)
  std::int64_t kv_cache_tokens = 0;  // paged: positions the pool holds; 0: rows x max_len, as static
  // rollout.prefill_tokens: a prefill call takes rows of at most this many positions in all (at
  // least one row); the rollout's activations are sized for it. 0: every row at once, or with
  // expert parallelism 1/ranks of the rows.
  std::int64_t prefill_tokens = 0;
  // rollout.expert_parallel: decode with the model's ExpertExchange, this rank's experts only;
  // the ranks run their forwards in lockstep (rollout/generator.hpp).
  bool expert_parallel = false;
};

// The paged engine's pool in blocks, its scratch block included, for `rows` decode slots of at
// most `max_len` positions: kv_cache_tokens (0: rows x max_len) in whole blocks, and never fewer
// than the scheduler needs at once, a sequence of max_len beside its prompt's blocks. What the
// generator allocates and the memory plan counts.
inline std::int64_t paged_pool_blocks(std::int64_t rows, std::int64_t max_len, const EngineOptions& e) {
  const std::int64_t bp = e.block_positions;
  const std::int64_t tokens = e.kv_cache_tokens > 0 ? e.kv_cache_tokens : rows * max_len;
  const std::int64_t per_sequence = (max_len + bp - 1) / bp;
  return std::max<std::int64_t>((tokens + bp - 1) / bp, 2 * per_sequence + 1) + 1;
}

}  // namespace shardrl
