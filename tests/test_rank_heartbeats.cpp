// The ranks' heartbeat files (io/rank_heartbeats.hpp), as the watchdog reads them: a rank that has
// not entered the awaited phase is named with its last phase; a rank that entered it and then went
// silent (stopped, dead: its file no longer touched) is named with how long it has been silent.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "io/rank_heartbeats.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("shardrl_heartbeats_") + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(RankHeartbeats, NamesTheRanksThatDidNotEnterThePhase) {
  const fs::path run = fresh_dir("behind");
  RankHeartbeats r0(run, 0, 3), r1(run, 1, 3), r2(run, 2, 3);
  r0.enter(1, "warm-up step 1");
  r1.enter(1, "warm-up step 1");
  r2.enter(1, "warm-up step 1");
  r0.enter(2, "iteration 0");
  r2.enter(2, "iteration 0");
  EXPECT_EQ(r0.behind(2), "rank 1 (last entered: warm-up step 1)");
  EXPECT_EQ(r0.behind(1), "");
  r1.enter(2, "iteration 0");
  EXPECT_EQ(r2.behind(2), "");
  fs::remove_all(run);
}

TEST(RankHeartbeats, NamesARankThatWentSilentInsideThePhase) {
  const fs::path run = fresh_dir("silent");
  RankHeartbeats r0(run, 0, 2);
  {
    RankHeartbeats r1(run, 1, 2);
    r0.enter(1, "iteration 0");
    r1.enter(1, "iteration 0");
  }   // rank 1 no longer runs: its file stays, untouched from now on
  // Ten seconds without a touch, as a stopped rank's file would be.
  const fs::path file = run / ".heartbeats" / "rank_1";
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec -= 10;
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  const std::string behind = r0.behind(1);
  EXPECT_NE(behind.find("rank 1 (entered iteration 0, then no sign of life for 1"), std::string::npos) << behind;
  EXPECT_NE(behind.find("s: stopped or dead)"), std::string::npos) << behind;
  EXPECT_EQ(behind.find("rank 0"), std::string::npos) << behind;
  // Within the allowance it is not named.
  EXPECT_EQ(r0.behind(1, 60.0), "");
  fs::remove_all(run);
}

}  // namespace
}  // namespace shardrl
