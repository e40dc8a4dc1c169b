// The logger of core/log.hpp in a child process whose stdout is a pipe: nobody reading it
// neither blocks a log call nor the exit; a pipe that is read gets every line whole and in order.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace shardrl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct ChildRun {
  bool finished = false;   // false: still running at the limit, then killed
  int exit_code = -1;
  double seconds = 0;      // from fork to exit (or to the kill)
  std::string out;         // its stdout, when read
  std::string report;      // what it wrote to its report pipe
};

// Runs `body` in a child process whose stdout is a pipe, then exit(0) there (so the exit runs the
// logger's at-exit flush); `body` may write a line to `report_fd`. With read_stdout false nobody
// reads the pipe (the parent keeps it open, so writes block rather than fail). A child not done
// after `limit_s` is killed.
ChildRun run_child(const std::function<void(int report_fd)>& body, bool read_stdout, double limit_s) {
  int out[2], report[2];
  if (pipe(out) != 0 || pipe(report) != 0) {
    ADD_FAILURE() << "pipe failed";
    return {};
  }
  std::fflush(stdout);   // or the child's exit writes the parent's buffered output into its pipe
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    close(report[0]);
    body(report[1]);
    std::exit(0);
  }
  close(out[1]);
  close(report[1]);
  ChildRun run;
  bool out_open = read_stdout;
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  int status = 0;
  for (;;) {
    char buf[65536];
    while (out_open) {
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n > 0) run.out.append(buf, static_cast<std::size_t>(n));
      else if (n == 0) out_open = false;
      else break;   // EAGAIN: nothing now
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      run.finished = true;
      break;
    }
    if (seconds_since(t0) > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    pollfd ready{out[0], POLLIN, 0};
    poll(&ready, out_open ? 1 : 0, 10);
  }
  run.seconds = seconds_since(t0);
  if (read_stdout) {   // what is left in the pipe once the child has ended
    char buf[65536];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) run.out.append(buf, static_cast<std::size_t>(n));
  }
  char buf[256];
  for (ssize_t n; (n = read(report[0], buf, sizeof buf)) > 0;) run.report.append(buf, static_cast<std::size_t>(n));
  close(out[0]);
  close(report[0]);
  if (run.finished && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

void write_report(int fd, const std::string& text) {
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::_Exit(9);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  for (std::size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(text.substr(pos, nl - pos));
  if (pos < text.size()) lines.push_back(text.substr(pos));   // an unterminated last line
  return lines;
}

// Open MPI's mpirun stops reading the ranks' stdout when it is signalled; a rank logging every
// step then blocked in write(2) and never reached its checkpoint save. 20000 lines are 2.5 MB,
// 40 times a pipe's 64 KiB: the logging must return at once, and the exit within its flush
// deadline, though the pipe never takes another byte.
TEST(Log, AStdoutNobodyReadsBlocksNeitherTheLogCallsNorTheExit) {
  const ChildRun run = run_child(
      [](int report_fd) {
        init_logging(0, false);
        const auto t0 = Clock::now();
        for (int i = 0; i < 20000; ++i) spdlog::info("step {} {}", i, std::string(100, 'x'));
        const double logging_s = seconds_since(t0);
        const bool flushed = flush_logging(std::chrono::milliseconds(300));
        write_report(report_fd, std::to_string(logging_s) + " " + (flushed ? "flushed" : "not-flushed") + "\n");
      },
      /*read_stdout=*/false, /*limit_s=*/20);
  ASSERT_TRUE(run.finished) << "the child was still running after 20 s (blocked on its stdout?); report: "
                            << run.report;
  EXPECT_EQ(run.exit_code, 0);
  double logging_s = 1e9;
  char flushed[32] = {};
  ASSERT_EQ(std::sscanf(run.report.c_str(), "%lf %31s", &logging_s, flushed), 2) << run.report;
  EXPECT_LT(logging_s, 2.0) << "20000 log calls";
  // The pipe really was full: the flush did not get through (so the test did stall stdout).
  EXPECT_STREQ(flushed, "not-flushed");
  // The exit waits kLogFlushDeadline for the stalled queue, then ends without it.
  EXPECT_LT(run.seconds, logging_s + 0.3 + std::chrono::duration<double>(kLogFlushDeadline).count() + 3.0);
}

// Four threads log 1500 lines each (6000, within the queue's 8192, so none is dropped), then the
// child exits without flushing: the exit's flush delivers every line, whole, each thread's in
// its order, with the pattern's time, level and rank prefix.
TEST(Log, EveryLineLoggedBeforeTheExitArrivesWholeAndInOrder) {
  constexpr int kThreads = 4, kLines = 1500;
  const ChildRun run = run_child(
      [](int) {
        init_logging(3, true);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t)
          threads.emplace_back([t] {
            for (int i = 0; i < kLines; ++i) spdlog::info("thread {} line {} {}", t, i, std::string(200, 'a' + t));
          });
        for (std::thread& t : threads) t.join();
      },
      /*read_stdout=*/true, /*limit_s=*/20);
  ASSERT_TRUE(run.finished);
  EXPECT_EQ(run.exit_code, 0);
  const std::vector<std::string> lines = split_lines(run.out);
  ASSERT_EQ(lines.size(), std::size_t(kThreads * kLines)) << run.out.substr(0, 2000);
  const std::regex pattern(R"(\[\d\d:\d\d:\d\d\.\d\d\d\] info \[rank 3\] thread (\d) line (\d+) ([a-d]+))");
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, pattern)) << "not a whole line: " << line;
    const int t = std::stoi(m[1]);
    ASSERT_LT(t, kThreads) << line;
    EXPECT_EQ(std::stoi(m[2]), next[t]) << "thread " << t << " out of order: " << line;
    EXPECT_EQ(m[3].str(), std::string(200, static_cast<char>('a' + t))) << line;
    next[t] = std::stoi(m[2]) + 1;
  }
  EXPECT_EQ(next, std::vector<int>(kThreads, kLines));
}

// init_logging again (the commands call it before and after the rank is known): the first
// logger's queued line still arrives, first; a rank other than 0 then logs warnings only.
TEST(Log, ASecondInitKeepsEarlierLinesAndTheLevelsFollowTheRank) {
  const ChildRun run = run_child(
      [](int) {
        init_logging(-1, false);
        spdlog::info("before the rank is known");
        init_logging(1, false);
        spdlog::info("an info line of rank 1");
        spdlog::warn("a warning of rank 1");
      },
      /*read_stdout=*/true, /*limit_s=*/20);
  ASSERT_TRUE(run.finished);
  EXPECT_EQ(run.exit_code, 0);
  const std::vector<std::string> lines = split_lines(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_TRUE(std::regex_match(lines[0], std::regex(R"(\[[\d:.]{12}\] info before the rank is known)"))) << lines[0];
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(R"(\[[\d:.]{12}\] warning \[rank 1\] a warning of rank 1)")))
      << lines[1];
}

// A progress bar's redraws go through the same queue: between the lines logged around them, as
// they are (the carriage return kept, no pattern, no newline added).
TEST(Log, UnformattedTextLandsBetweenTheLinesAroundIt) {
  const ChildRun run = run_child(
      [](int) {
        init_logging(0, false);
        spdlog::info("before");
        log_unformatted("\rsaving: [###   ] 50%");
        log_unformatted("\rsaving: done\n");
        spdlog::info("after");
      },
      /*read_stdout=*/true, /*limit_s=*/20);
  ASSERT_TRUE(run.finished);
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_TRUE(std::regex_match(run.out, std::regex(R"(\[[\d:.]{12}\] info \[rank 0\] before\n)"
                                                   R"(\rsaving: \[###   \] 50%\rsaving: done\n)"
                                                   R"(\[[\d:.]{12}\] info \[rank 0\] after\n)")))
      << run.out;
}

// A fatal error ends the process at once (_Exit, or MPI_Abort under MPI), which would take the
// queued lines with it: fatal() gives them the flush deadline first, so the lines that led to the
// error are in the log. With a stdout nobody reads it still ends, after the deadline.
TEST(Log, LinesLoggedBeforeAFatalErrorReachStdoutAndAStalledOneDoesNotHoldTheExit) {
  const auto log_then_fail = [](int report_fd) {
    dup2(report_fd, STDERR_FILENO);   // fatal()'s message, for the assertions
    init_logging(0, false);
    for (int i = 0; i < 3000; ++i) spdlog::info("step {} {}", i, std::string(100, 'x'));
    spdlog::error("the cause");
    SHARDRL_FATAL("the end");
  };
  const ChildRun healthy = run_child(log_then_fail, /*read_stdout=*/true, /*limit_s=*/20);
  ASSERT_TRUE(healthy.finished);
  EXPECT_EQ(healthy.exit_code, kExitFatal);
  const std::vector<std::string> lines = split_lines(healthy.out);
  ASSERT_EQ(lines.size(), 3001u) << healthy.out.substr(healthy.out.size() > 2000 ? healthy.out.size() - 2000 : 0);
  EXPECT_NE(lines.back().find("] error [rank 0] the cause"), std::string::npos) << lines.back();
  EXPECT_NE(healthy.report.find("shardrl: fatal error on rank ? "), std::string::npos) << healthy.report;
  EXPECT_NE(healthy.report.find("the end"), std::string::npos) << healthy.report;

  const ChildRun stalled = run_child(log_then_fail, /*read_stdout=*/false, /*limit_s=*/20);
  ASSERT_TRUE(stalled.finished) << "fatal() waited for a stdout nobody reads";
  EXPECT_EQ(stalled.exit_code, kExitFatal);
  EXPECT_NE(stalled.report.find("the end"), std::string::npos) << stalled.report;
  EXPECT_LT(stalled.seconds, std::chrono::duration<double>(kLogFlushDeadline).count() + 3.0);
}

}  // namespace
}  // namespace shardrl
