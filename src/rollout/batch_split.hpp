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

// The rank whose block of prompts_of_rank holds `prompt`.
inline int rank_of_prompt(std::int64_t prompt, std::int64_t prompts, int ranks) {
  const std::int64_t base = prompts / ranks, extra = prompts % ranks;
  const std::int64_t in_long_blocks = extra * (base + 1);   // the first `extra` ranks hold base + 1
  if (prompt < in_long_blocks) return static_cast<int>(prompt / (base + 1));
  return static_cast<int>(extra + (prompt - in_long_blocks) / base);
}

}  // namespace shardrl
