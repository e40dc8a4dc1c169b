// DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to the reward of a completion
// of `length` tokens when rl.overlong = "soft": 0 up to max_new_tokens - buffer, then falling
// linearly to -1 at max_new_tokens (a completion cannot be longer).
#pragma once

#include <algorithm>

namespace shardrl {

inline double overlong_penalty(int length, int max_new_tokens, int buffer) {
  const int free_len = max_new_tokens - buffer;
  if (buffer <= 0 || length <= free_len) return 0.0;
  return std::max(-1.0, static_cast<double>(free_len - length) / buffer);
}

}  // namespace shardrl
