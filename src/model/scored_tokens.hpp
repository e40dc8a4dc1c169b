// How a batch marks the tokens the head does not score (Transformer::set_batch), so that the
// layers that build batches (rl/sequence.cpp) need not include the model.
#pragma once

#include <cstdint>

namespace shardrl {

// The target of a token whose log-probability nobody reads (a prompt's, padding).
constexpr std::int32_t kUnscoredTarget = -1;

}  // namespace shardrl
