// bf16 conversion against an fp64 reference of round-to-nearest-even.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/bf16.hpp"

namespace shardrl {
namespace {

// The bf16 nearest to x (ties to even), computed in fp64 from the two neighbouring bf16 values.
double reference_round(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  std::uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, 4);
  std::memcpy(&hi, &hi_bits, 4);
  double dlo = std::fabs(double(x) - double(lo)), dhi = std::fabs(double(hi) - double(x));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return ((lo_bits >> 16) & 1u) ? hi : lo;
}

TEST(Bf16, RoundsToNearestEvenLikeTheReference) {
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    std::uint32_t bits = state & 0xbfffffffu;   // finite values, both signs
    float x;
    std::memcpy(&x, &bits, 4);
    if (!std::isfinite(x)) continue;
    double ref = reference_round(x);
    if (std::isinf(ref)) continue;   // overflow to inf is checked below
    ASSERT_EQ(double(static_cast<float>(bf16(x))), ref) << "x = " << x;
  }
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(static_cast<float>(bf16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bf16(-2.5f)), -2.5f);
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 1.0f / 256)), 1.0f);          // tie -> even (down)
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);  // tie -> even (up)
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(std::numeric_limits<float>::max()))));  // rounds up
}

}  // namespace
}  // namespace shardrl
