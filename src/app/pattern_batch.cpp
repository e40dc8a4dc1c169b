#include "app/pattern_batch.hpp"

#include <random>

namespace shardrl {

TokenBatch pattern_batch(std::uint64_t seed, std::int64_t iteration, std::int64_t first, int B, int S, int vocab) {
  TokenBatch b;
  b.B = B;
  b.S = S;
  for (int i = 0; i < B; ++i) {
    std::seed_seq key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                      static_cast<std::uint32_t>(iteration), static_cast<std::uint32_t>(first + i)};
    std::mt19937_64 gen(key);
    // Lower-case letters as bytes (the byte-level vocabulary), or the whole vocabulary if smaller.
    const int lo = vocab > 122 ? 97 : 0, hi = vocab > 122 ? 122 : vocab - 1;
    std::uniform_int_distribution<int> length(2, 8), token(lo, hi);
    std::vector<std::int32_t> pattern(length(gen));
    for (auto& t : pattern) t = token(gen);
    for (int s = 0; s < S; ++s) b.tokens.push_back(pattern[s % pattern.size()]);
    for (int s = 0; s < S; ++s) {
      b.targets.push_back(s + 1 < S ? b.tokens[i * S + s + 1] : 0);
      b.mask.push_back(s + 1 < S ? 1.0f : 0.0f);
    }
  }
  return b;
}

}  // namespace shardrl
