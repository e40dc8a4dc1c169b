// When the embedding's own gradient travels between ranks as rows: the one rule the trainer
// (ShardedTrainer::reduce_lookup_rows) and the memory plan (job/memory_plan.cpp) share.
#pragma once

#include <cstdint>

namespace shardrl {

// Whether the embedding's own gradient (its lookup's, nonzero only in the rows of the batch's
// tokens) goes between ranks as rows, each rank's distinct tokens (`tokens` at most) and their
// summed gradient rows all-gathered, rather than as a reduce-scatter of the (vocab, d_model)
// table: where there are ranks to exchange with and their rows together are fewer than the
// table's.
inline bool lookup_gradient_as_rows(int ranks, std::int64_t tokens, std::int64_t vocab) {
  return ranks > 1 && std::int64_t(ranks) * tokens < vocab;
}

}  // namespace shardrl
