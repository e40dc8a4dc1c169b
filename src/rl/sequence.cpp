#include "rl/sequence.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {

void fill_rows(const std::vector<Sequence>& sequences, int first, int end, int count, int S, std::int32_t pad,
               std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) {
  tokens.assign(std::size_t(count) * S, pad);
  targets.assign(tokens.size(), pad);
  for (int r = 0; r < count; ++r) {
    const int i = first + r;
    if (i >= end) continue;
    const auto& ids = sequences[i].ids;
    SHARDRL_CHECK(static_cast<int>(ids.size()) <= S + 1,
                  fmt::format("a sequence of {} ids does not fit {} positions", ids.size(), S));
    for (std::size_t t = 0; t + 1 < ids.size(); ++t) {
      tokens[std::size_t(r) * S + t] = ids[t];
      targets[std::size_t(r) * S + t] = ids[t + 1];
    }
  }
}

}  // namespace shardrl
