// The job's workload until the RL loop exists: sequences that repeat a random pattern, so a
// model that learns to copy (induction) drives the loss towards zero. Sequence g of iteration
// `it` depends only on (seed, it, g), never on the rank: every world size sees the same global
// batch, split by sequence index.
#pragma once

#include <cstdint>
#include <vector>

namespace shardrl {

struct TokenBatch {
  int B = 0, S = 0;
  std::vector<std::int32_t> tokens, targets;   // (B, S); targets are the next tokens
  std::vector<float> mask;                     // (B, S); 0 where there is no next token
};

// Sequences [first, first + B) of iteration `it`: each repeats a pattern of 2..8 lower-case
// letters (bytes 97..122; any token below vocab if the vocabulary is smaller).
TokenBatch pattern_batch(std::uint64_t seed, std::int64_t iteration, std::int64_t first, int B, int S, int vocab);

}  // namespace shardrl
