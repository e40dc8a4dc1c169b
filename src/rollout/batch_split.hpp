// Which prompts of an iteration's global batch a rank generates for: a contiguous block, the
// first (prompts % ranks) ranks taking one more. A prompt's whole group of samples stays on the
// rank that holds the prompt.
#pragma once

#include <cstdint>
#include <utility>

namespace shardrl {

inline std::pair<std::int64_t, std::int64_t> prompts_of_rank(std::int64_t prompts, int ranks, int rank) {
  const std::int64_t base = prompts / ranks, extra = prompts % ranks;
  const std::int64_t begin = rank * base + (rank < extra ? rank : extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace shardrl
