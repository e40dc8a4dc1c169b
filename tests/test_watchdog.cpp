// The watchdog ends a process whose phase outlives its deadline, and leaves one alone that
// finished in time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/watchdog.hpp"

namespace shardrl {
namespace {

TEST(Watchdog, ExpiredPhaseEndsTheProcessNamingIt) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        Watchdog w;
        w.arm(0.2, "iteration 7");
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(1), "iteration 7 did not complete within comm.timeout_s = 0.2 s");
}

// A phase on a deadline of another key (a checkpoint save: checkpoint.timeout_s) names that key.
TEST(Watchdog, ExpiredPhaseNamesTheKeyOfItsDeadline) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        Watchdog w;
        w.arm(0.2, "checkpoint save", {}, "checkpoint.timeout_s", ", or the storage is too slow (raise it)");
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(1),
      "checkpoint save did not complete within checkpoint.timeout_s = 0.2 s: a peer rank failed or is stuck, or the "
      "storage is too slow \\(raise it\\)");
}

TEST(Watchdog, DisarmedPhaseLivesOn) {
  Watchdog w;
  for (int i = 0; i < 3; ++i) {
    w.arm(0.2, "iteration");
    w.disarm();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  SUCCEED() << "still running after the deadline of every disarmed phase";
}

// comm.timeout_s = 1e10 means "never": in nanoseconds it overflows the clock, and the deadline
// came out in the past, ending the job at its first watch.
TEST(Watchdog, AHugeTimeoutNeverExpires) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        Watchdog w;
        w.arm(1e10, "opening the metrics log");
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace shardrl
