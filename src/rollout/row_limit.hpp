// A row's own limit of new tokens (GenerationRow::max_new_tokens), at most the call's: where both
// rollout engines end a row that has not drawn EOS.
#pragma once

#include <algorithm>

#include "rollout/generator.hpp"

namespace shardrl {

inline int row_token_limit(const GenerationRow& row, int max_new_tokens) {
  return row.max_new_tokens > 0 ? std::min(row.max_new_tokens, max_new_tokens) : max_new_tokens;
}

}  // namespace shardrl
