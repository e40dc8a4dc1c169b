// Tests of LogLineBudget (rl/log_line_budget.hpp) with a stepped clock: the first lines of a
// window pass, the rest are counted with their last few held, a window's end logs the count, and
// the child's end logs the count and the held lines.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rl/log_line_budget.hpp"

namespace shardrl {
namespace {

using Clock = LogLineBudget::Clock;
using std::chrono::seconds;
using Lines = std::vector<std::string>;

TEST(LogLineBudget, WithinTheBudgetEveryLinePassesAndCloseAddsNothing) {
  LogLineBudget budget(3, seconds(60), 2);
  const Clock::time_point t0{};
  EXPECT_EQ(budget.line("a", t0), Lines{"a"});
  EXPECT_EQ(budget.line("b", t0 + seconds(1)), Lines{"b"});
  EXPECT_EQ(budget.line("c", t0 + seconds(2)), Lines{"c"});
  EXPECT_FALSE(budget.deadline());
  EXPECT_EQ(budget.close(), Lines{});
}

TEST(LogLineBudget, CloseLogsTheCountAndTheLastHeldLines) {
  LogLineBudget budget(2, seconds(60), 2);
  const Clock::time_point t0{};
  EXPECT_EQ(budget.line("1", t0), Lines{"1"});
  EXPECT_EQ(budget.line("2", t0), Lines{"2"});
  for (const char* text : {"3", "4", "5", "Traceback (most recent call last):", "ValueError: boom"}) {
    EXPECT_EQ(budget.line(text, t0 + seconds(1)), Lines{});
  }
  ASSERT_TRUE(budget.deadline());
  EXPECT_EQ(*budget.deadline(), t0 + seconds(60));
  EXPECT_EQ(budget.close(), (Lines{"[5 more stderr lines not logged; the last 2, before its stderr closed:]",
                                   "Traceback (most recent call last):", "ValueError: boom"}));
  EXPECT_EQ(budget.close(), Lines{});   // once
}

TEST(LogLineBudget, AWindowsEndLogsItsCountAndOpensANewBudget) {
  LogLineBudget budget(1, seconds(10), 5);
  const Clock::time_point t0{};
  EXPECT_EQ(budget.line("a", t0), Lines{"a"});
  EXPECT_EQ(budget.line("b", t0 + seconds(1)), Lines{});
  EXPECT_EQ(budget.tick(t0 + seconds(9)), Lines{});   // not yet
  EXPECT_EQ(budget.tick(t0 + seconds(10)),
            Lines{"[1 more stderr line not logged: at most 1 in 10 s are, and the last 5 before it ends]"});
  EXPECT_FALSE(budget.deadline());
  // The next window starts with the next line, whenever it comes.
  EXPECT_EQ(budget.line("c", t0 + seconds(100)), Lines{"c"});
  EXPECT_EQ(budget.line("d", t0 + seconds(101)), Lines{});
  // A line after the window's end logs the count first, then itself in the new window.
  EXPECT_EQ(budget.line("e", t0 + seconds(110)),
            (Lines{"[1 more stderr line not logged: at most 1 in 10 s are, and the last 5 before it ends]", "e"}));
  // What a closed window held back is not logged again at the end.
  EXPECT_EQ(budget.close(), Lines{});
}

TEST(LogLineBudget, AQuietWindowEndsWithoutAMessage) {
  LogLineBudget budget(2, seconds(10), 1);
  const Clock::time_point t0{};
  EXPECT_EQ(budget.line("a", t0), Lines{"a"});
  EXPECT_FALSE(budget.deadline());   // nothing held: no wake-up needed
  EXPECT_EQ(budget.tick(t0 + seconds(30)), Lines{});
  EXPECT_EQ(budget.line("b", t0 + seconds(31)), Lines{"b"});
  EXPECT_EQ(budget.line("c", t0 + seconds(32)), Lines{"c"});
}

}  // namespace
}  // namespace shardrl
