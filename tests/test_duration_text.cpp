// The progress line's time left: rounded once, then split into its units, so no part reads 60.
#include <gtest/gtest.h>

#include "app/progress.hpp"

namespace shardrl {
namespace {

TEST(DurationText, RoundsOnceThenSplits) {
  EXPECT_EQ(duration_text(0), "0s");
  EXPECT_EQ(duration_text(-3), "0s");
  EXPECT_EQ(duration_text(44.4), "44s");
  EXPECT_EQ(duration_text(59.6), "1m00s");   // was "60s"
  EXPECT_EQ(duration_text(65), "1m05s");
  EXPECT_EQ(duration_text(119.6), "2m00s");   // was "1m60s"
  EXPECT_EQ(duration_text(3599.7), "1h00m");  // was "59m60s"
  EXPECT_EQ(duration_text(7170), "2h00m");    // was "1h60m" (119.5 minutes)
  EXPECT_EQ(duration_text(7380), "2h03m");
  EXPECT_EQ(duration_text(90000), "25h00m");
}

}  // namespace
}  // namespace shardrl
