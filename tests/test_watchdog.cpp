// The watchdog ends a process whose phase outlives its deadline, and leaves one alone that
// finished in time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/child_groups.hpp"
#include "core/watchdog.hpp"

extern char** environ;

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

// A phase of many short steps (a rollout's decode steps, a train phase's micro-batches) is
// bounded step by step: each sign of progress restarts its deadline, and the message then says
// it made no progress (a real rollout outlived comm.timeout_s, which bounded the iteration whole).
TEST(Watchdog, ProgressRestartsTheDeadline) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        Watchdog w;
        w.arm(0.5, "iteration 2");
        for (int i = 0; i < 8; ++i) {   // 1.6 s in steps of 0.2
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          w.progress();
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        Watchdog w;
        w.arm(0.5, "iteration 2");
        w.progress();
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(1), "iteration 2 made no progress within comm.timeout_s = 0.5 s");
}

// What the phase waits for is read from the run's shared file system; a hung one (the storage
// the deadline caught) kept the message from ever being printed and the process from exiting.
TEST(Watchdog, TheCauseIsPrintedAndTheProcessEndsThoughItsDetailHangs) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        Watchdog w;
        w.arm(0.2, "checkpoint save", [] {
          std::this_thread::sleep_for(std::chrono::hours(1));
          return std::string("never");
        });
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(1), "checkpoint save did not complete within comm.timeout_s = 0.2 s");
}

// `sleep 1000` leading a process group of its own, as the reward command does; its pid or -1.
pid_t spawn_sleep_in_own_group() {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  // Its output elsewhere than the death test's pipes, which a child left running would hold open.
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&files, 3);   // the death test's status pipe too
  pid_t pid = 0;
  char sleep_name[] = "sleep", forever[] = "1000";
  char* args[] = {sleep_name, forever, nullptr};
  const int err = posix_spawnp(&pid, "sleep", &files, &attr, args, environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  return err == 0 ? pid : -1;
}

// A child process leads a group of its own (the reward command), which no launcher's signal to
// the rank reaches: the watchdog's exit, which runs no destructors, ends it too.
TEST(Watchdog, ItsExitEndsTheChildrensProcessGroups) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  const std::filesystem::path pid_file =
      std::filesystem::temp_directory_path() / ("shardrl_watchdog_child_of_uid_" + std::to_string(getuid()));
  EXPECT_EXIT(
      {
        const pid_t pid = spawn_sleep_in_own_group();
        if (pid <= 0) std::exit(3);
        note_child_group(pid);
        std::ofstream(pid_file) << pid << "\n";
        Watchdog w;
        w.arm(0.2, "scoring");
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(1), "scoring did not complete");
  pid_t pid = 0;
  ASSERT_TRUE(std::ifstream(pid_file) >> pid);
  std::filesystem::remove(pid_file);
  // Orphaned by the exit; killed, it is a zombie until init (or a subreaper) reaps it.
  const auto ended = [pid] {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string id, name, state;
    return stat >> id >> name >> state && state == "Z";
  };
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = ended();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!gone) ::kill(-pid, SIGKILL);
  EXPECT_TRUE(gone) << "the child's group outlived the watchdog's exit";
}

// Slurm's suspend (scontrol suspend, gang scheduling, suspend-preemption) stops every process of
// a job and continues it later: the time stopped is not the phase's. A job stopped for longer
// than its deadline ended as soon as it was continued.
TEST(Watchdog, ASuspendedProcessDoesNotCountItsStop) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Watchdog w;
    w.arm(4, "iteration 3");
    std::this_thread::sleep_for(std::chrono::seconds(6));   // 1 s of it running, 5 s stopped
    std::_Exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(child, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ::kill(child, SIGCONT);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the watchdog counted the 5 s stopped against its 4 s";
}

}  // namespace
}  // namespace shardrl
