// The values the start-up collective check (collective_smoke.cpp) puts on each rank, and the sums
// every rank can compute on its own: apart so that their exactness is tested without a device or
// hundreds of ranks.
#pragma once

#include "core/kokkos.hpp"

namespace shardrl {

// The most ranks that hold a 1 anywhere: every sum (and partial sum) of the checks then stays
// within 256, the integers bf16 holds exactly (with 0 or 1 on every rank, a bf16 job of 513 ranks
// or more failed its start-up check on sums of 257 and more).
constexpr long kSmokeRanksWithOnes = 256;

// The value rank r holds at element i in round `it`: 0 or 1 on the first kSmokeRanksWithOnes ranks,
// 0 on the others.
KOKKOS_INLINE_FUNCTION int smoke_pattern(long r, long i, long it) {
  return r < kSmokeRanksWithOnes ? static_cast<int>((r + i + it) & 1) : 0;
}

// Number of ranks r in [0, n) with smoke_pattern(r, i, it) == 1.
KOKKOS_INLINE_FUNCTION int smoke_ones_over_ranks(long n, long i, long it) {
  const long m = n < kSmokeRanksWithOnes ? n : kSmokeRanksWithOnes;
  long parity_one_first = (i + it) & 1;   // smoke_pattern(0, i, it)
  return static_cast<int>(parity_one_first ? (m + 1) / 2 : m / 2);
}

}  // namespace shardrl
