// When the embedding's lookup travels between ranks as rows: the one rule the trainer
// (fsdp/sharded_trainer_lookup.cpp) and the memory plan (job/memory_plan.cpp) share.
#pragma once

#include <cstdint>

namespace shardrl {

// Whether the embedding's lookup goes between ranks as rows of the ranks' tokens rather than as
// the (vocab, d_model) table: in forward, every rank's token ids all-gathered, each rank looking
// up the part of their rows in its slice and the ranks' parts reduce-scattered, instead of an
// all-gather of the table; in backward, each rank's distinct tokens (`tokens` at most) and their
// summed gradient rows all-gathered, instead of a reduce-scatter of the table's gradient. Where
// there are ranks to exchange with and their rows together are fewer than the table's.
inline bool lookup_as_rows(int ranks, std::int64_t tokens, std::int64_t vocab) {
  return ranks > 1 && std::int64_t(ranks) * tokens < vocab;
}

}  // namespace shardrl
