// The job's stop flag (core/stop_request.hpp), in a process of its own (the flag is global):
// SIGUSR1 or SIGTERM asks to stop; SIGTERM, once it came, stays the answer, so that a SIGUSR1
// after it (Slurm's warning forwarded late) does not turn a stop that gives up the rollout back
// into one that finishes the iteration.
#include <gtest/gtest.h>

#include <csignal>

#include "core/stop_request.hpp"

namespace shardrl {
namespace {

TEST(StopRequest, ASigtermStaysTheAnswerAfterALaterSigusr1) {
  install_stop_handlers();
  EXPECT_FALSE(stop_requested());
  EXPECT_EQ(stop_signal(), 0);
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_TRUE(stop_requested());
  EXPECT_EQ(stop_signal(), SIGUSR1);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_EQ(stop_signal(), SIGTERM) << "a SIGTERM after a SIGUSR1";
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_EQ(stop_signal(), SIGTERM) << "a SIGUSR1 after a SIGTERM";
  EXPECT_TRUE(stop_requested());
}

}  // namespace
}  // namespace shardrl
