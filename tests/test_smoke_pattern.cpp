// The start-up collective check's values: what every rank computes on its own as a sum over the
// ranks is that sum, and stays within the integers bf16 holds exactly at any rank count (at 513
// ranks and more, sums of 0/1 per rank passed 256 and a bf16 job failed its own check).
#include <gtest/gtest.h>

#include "app/smoke_pattern.hpp"
#include "core/bf16.hpp"

namespace shardrl {
namespace {

TEST(SmokePattern, SumsAreExactInBf16AtAnyRankCount) {
  for (long n : {1L, 2L, 3L, 255L, 256L, 257L, 513L, 4096L})
    for (long it = 0; it < 2; ++it)
      for (long i = 0; i < 4; ++i) {
        long sum = 0;
        for (long r = 0; r < n; ++r) sum += smoke_pattern(r, i, it);
        EXPECT_EQ(sum, smoke_ones_over_ranks(n, i, it)) << n << " ranks, element " << i;
        EXPECT_LE(sum, 256);
        EXPECT_EQ(static_cast<float>(bf16(static_cast<float>(sum))), static_cast<float>(sum)) << n << " ranks";
      }
}

}  // namespace
}  // namespace shardrl
