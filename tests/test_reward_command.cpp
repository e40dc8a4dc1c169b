// Tests of the reward command (rl/reward_command.hpp) against small scripts in
// tests/reward_commands: replies in order, a long-lived process, no pipe deadlock, stderr in the
// log, and an InputError naming command, problem and request for each way a command can fail.
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "rl/reward_command.hpp"

namespace shardrl {
namespace {

using Clock = std::chrono::steady_clock;

std::string script(const std::string& name) {
  return std::string(SHARDRL_SOURCE_DIR) + "/tests/reward_commands/" + name;
}

bool in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

#define REQUIRE_PYTHON3()                                                      \
  do {                                                                         \
    if (!in_path("python3")) GTEST_SKIP() << "python3 not found in PATH";      \
  } while (0)

RewardRequest request(std::string answer, std::string completion = "done", double bonus = 0) {
  RewardRequest r;
  r.prompt = "What is the answer?";
  r.completion = std::move(completion);
  r.answer = std::move(answer);
  if (bonus != 0) r.metadata["bonus"] = bonus;
  return r;
}

std::vector<RewardRequest> requests(std::size_t count) {
  std::vector<RewardRequest> batch;
  for (std::size_t i = 0; i < count; ++i) batch.push_back(request(std::to_string(i)));
  return batch;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The message of the InputError that `run` throws; fails the test when it throws none.
template <typename Run>
std::string input_error_of(Run run) {
  try {
    run();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return "";
}

// The rewards of scored completions, in order.
std::vector<double> rewards_of(const std::vector<Scored>& scored) {
  std::vector<double> rewards;
  for (const Scored& s : scored) rewards.push_back(s.reward);
  return rewards;
}

// The process has been reaped: not even a zombie is left under its pid.
bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// The process has ended: gone, or a zombie waiting for a parent that does not reap (an orphan in
// a container whose first process reaps nobody).
bool process_ended(pid_t pid) {
  if (process_gone(pid)) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t after_name = text.rfind(')');
  return after_name != std::string::npos && after_name + 2 < text.size() && text[after_name + 2] == 'Z';
}

TEST(RewardCommand, ScoresABatchInOrder) {
  REQUIRE_PYTHON3();
  RewardCommand command({"python3", script("answer_as_reward.py")}, 30);
  const std::vector<RewardRequest> batch = {request("1"), request("-2.25"), request("0.001"),
                                            request("1e3", "x", 0.5), request("7", "y", -7)};
  EXPECT_EQ(rewards_of(command.score(batch)), (std::vector<double>{1, -2.25, 0.001, 1000.5, 0}));
  EXPECT_EQ(command.command_line(), "python3 " + script("answer_as_reward.py"));
}

// A reply's "pass" marks the completion a pass whatever its reward (a right answer with a length
// penalty); without it a reward of exactly 1 passes.
TEST(RewardCommand, AReplyMayMarkItsPass) {
  REQUIRE_PYTHON3();
  RewardCommand command({"python3", script("answer_as_reward.py")}, 30);
  std::vector<RewardRequest> batch = {request("0.75"), request("1"), request("1"), request("0.999"), request("2")};
  batch[0].metadata["pass"] = true;
  batch[2].metadata["pass"] = false;
  EXPECT_EQ(command.score(batch), (std::vector<Scored>{{0.75, true}, {1, true}, {1, false}, {0.999, false},
                                                       {2, false}}));
}

TEST(RewardCommand, TextsArriveWhole) {
  REQUIRE_PYTHON3();
  RewardCommand command({"python3", script("text_length.py")}, 30);
  RewardRequest r;
  r.prompt = "two\nlines";                                   // 9 code points
  r.completion = "a \"quoted\"\tline\r\nthen \xc3\xa9 and \xff";   // invalid byte -> U+FFFD
  const double completion_code_points = 29;
  EXPECT_EQ(rewards_of(command.score({r})), (std::vector<double>{9 + 1000 * completion_code_points}));
}

TEST(RewardCommand, OneProcessServesManyBatches) {
  REQUIRE_PYTHON3();
  RewardCommand command({"python3", script("call_counter.py")}, 30);
  EXPECT_EQ(rewards_of(command.score(requests(3))), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(rewards_of(command.score({})), std::vector<double>{});
  EXPECT_EQ(rewards_of(command.score(requests(2))), (std::vector<double>{4, 5}));
}

// 2000 completions of 100 KB each way: far more than both pipes hold, with a command that
// answers each line before it reads the next.
TEST(RewardCommand, BigBatchFillingBothPipesDoesNotDeadlock) {
  REQUIRE_PYTHON3();
  RewardCommand command({"python3", script("echo_completion.py")}, 300);
  const std::size_t count = 2000, length = 100000;
  std::vector<RewardRequest> batch;
  for (std::size_t i = 0; i < count; ++i)
    batch.push_back(request("0", std::string(length + i, static_cast<char>('a' + i % 26))));
  const std::vector<double> rewards = rewards_of(command.score(batch));
  ASSERT_EQ(rewards.size(), count);
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(rewards[i], static_cast<double>(length + i)) << i;
}

// Captures what is logged through the default spdlog logger while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    sink->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream text_;
};

TEST(RewardCommand, StderrGoesToTheLogLineByLine) {
  CapturedLog log;
  {
    RewardCommand command({"/bin/sh", script("stderr_lines.sh")}, 30);
    EXPECT_EQ(rewards_of(command.score(requests(3))), (std::vector<double>{0, 1, 2}));
  }   // destruction joins the forwarder: every line is logged by now
  EXPECT_EQ(log.text(),
            "warning reward command: starting up\n"
            "warning reward command: scoring request 0\n"
            "warning reward command: scoring request 1\n"
            "warning reward command: scoring request 2\n"
            "warning reward command: bye without newline\n");
}

// Past the budget (50 lines a minute) the lines are counted, and a crash still logs its
// traceback: the count and the last 50 lines come when stderr closes, before the error.
TEST(RewardCommand, AChattyCommandsLinesAreCappedButItsTracebackIsLogged) {
  CapturedLog log;
  std::string message;
  {
    RewardCommand command({"/bin/sh", script("chatty_then_crash.sh")}, 30);
    message = input_error_of([&] { command.score(requests(5)); });
  }
  EXPECT_NE(message.find("exited with status 1 before replying to request 4 of 5"), std::string::npos) << message;
  std::vector<std::string> lines;
  std::stringstream text(log.text());
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  // 50 passed, then the count, then the last 50 of the 72 held back (120 + 2 in all).
  ASSERT_EQ(lines.size(), 101u) << log.text();
  EXPECT_EQ(lines[0], "warning reward command: request 0 detail 0");
  EXPECT_EQ(lines[49], "warning reward command: request 1 detail 19");
  EXPECT_EQ(lines[50], "warning reward command: [72 more stderr lines not logged; the last 50, before its stderr closed:]");
  EXPECT_EQ(lines[51], "warning reward command: request 2 detail 12");
  EXPECT_EQ(lines[99], "warning reward command: Traceback (most recent call last):");
  EXPECT_EQ(lines[100], "warning reward command: ValueError: request 4 is bad");
}

TEST(RewardCommand, CrashMidBatchNamesExitStatusAndRequest) {
  RewardCommand command({"/bin/sh", script("crash_after_two.sh")}, 30);
  const std::string message = input_error_of([&] { command.score(requests(4)); });
  EXPECT_NE(message.find("reward command `/bin/sh " + script("crash_after_two.sh") + "`"), std::string::npos)
      << message;
  EXPECT_NE(message.find("exited with status 3 before replying to request 2 of 4"), std::string::npos) << message;
  // Out of step from now on: later batches fail at once, with the first error.
  const std::string later = input_error_of([&] { command.score(requests(1)); });
  EXPECT_NE(later.find("unusable after an earlier error"), std::string::npos) << later;
  EXPECT_NE(later.find("exited with status 3"), std::string::npos) << later;
}

TEST(RewardCommand, KilledBySignalIsNamed) {
  RewardCommand command({"/bin/sh", script("killed_by_signal.sh")}, 30);
  const std::string message = input_error_of([&] { command.score(requests(2)); });
  EXPECT_NE(message.find("was killed by signal 9"), std::string::npos) << message;
  EXPECT_NE(message.find("request 0 of 2"), std::string::npos) << message;
}

// The command exits while we still write: EPIPE, not a SIGPIPE that kills the job.
TEST(RewardCommand, ExitWhileWritingIsAnErrorNotASigpipe) {
  RewardCommand command({"/bin/sh", script("exits_early.sh")}, 30);
  std::vector<RewardRequest> batch;
  for (int i = 0; i < 100; ++i) batch.push_back(request("1", std::string(100000, 'z')));
  const std::string message = input_error_of([&] { command.score(batch); });
  EXPECT_NE(message.find("exited with status 0 before replying to request 0 of 100"), std::string::npos)
      << message;
  sigset_t pending, blocked;
  ::sigpending(&pending);
  ::pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));
  EXPECT_FALSE(sigismember(&blocked, SIGPIPE));
}

TEST(RewardCommand, ClosingStdinWhileRunningIsNamed) {
  RewardCommand command({"/bin/sh", script("closes_stdin.sh")}, 60);
  std::vector<RewardRequest> batch;
  for (int i = 0; i < 100; ++i) batch.push_back(request("1", std::string(100000, 'z')));
  const auto start = Clock::now();
  const std::string message = input_error_of([&] { command.score(batch); });
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_NE(message.find("stopped reading its stdin and is still running, with no reply to request 0 of 100"),
            std::string::npos)
      << message;
}

// Each bad reply to the second request: the problem, the request index and the line quoted.
TEST(RewardCommand, BadRepliesNameProblemRequestAndLine) {
  struct Case {
    std::string reply, problem;
  };
  const std::vector<Case> cases = {
      {"not json at all", "reply to request 1 of 3 (0-based) is not JSON ("},
      {"{\"score\": 1}", "reply to request 1 of 3 (0-based) has no \"reward\""},
      {"{\"reward\": \"x\"}", "reply to request 1 of 3 (0-based): \"reward\" is a string, not a number"},
      {"{\"reward\": true}", "reply to request 1 of 3 (0-based): \"reward\" is a boolean, not a number"},
      {"[0.5]", "reply to request 1 of 3 (0-based) is a JSON array, not an object"},
      {"{\"reward\": 1, \"reward\": 0}", "reply to request 1 of 3 (0-based): key \"reward\" appears twice in one object"},
      {"{\"reward\": 0.5, \"pass\": 1}", "reply to request 1 of 3 (0-based): \"pass\" is a number, not true or false"},
      {"{\"reward\": 0.5, \"pass\": \"yes\"}", "reply to request 1 of 3 (0-based): \"pass\" is a string, not true or false"},
      {"", "reply to request 1 of 3 (0-based) is not JSON ("},
      // nlohmann::json 3.11 rejects a number that overflows a double ("number overflow");
      // a version that parsed it as inf would meet the finiteness check instead.
      {"{\"reward\": 1e999}", "reply to request 1 of 3 (0-based)"},
  };
  for (const Case& c : cases) {
    RewardCommand command({"/bin/sh", script("bad_reply.sh"), c.reply}, 30);
    const std::string message = input_error_of([&] { command.score(requests(3)); });
    EXPECT_NE(message.find(c.problem), std::string::npos) << message;
    EXPECT_NE(message.find(": \"" + excerpt(c.reply) + "\""), std::string::npos) << message;
    EXPECT_NE(message.find("bad_reply.sh"), std::string::npos) << message;
  }
}

TEST(RewardCommand, OverflowingRewardIsRejected) {
  RewardCommand command({"/bin/sh", script("bad_reply.sh"), "{\"reward\": 1e999}"}, 30);
  const std::string message = input_error_of([&] { command.score(requests(2)); });
  const bool rejected = message.find("number overflow") != std::string::npos ||
                        message.find("\"reward\" is not finite") != std::string::npos;
  EXPECT_TRUE(rejected) << message;
}

// A command that ends as it starts is said before any request (the job asks before its warm-up);
// one still running after the settle time passes, at once after that.
TEST(RewardCommand, ACommandThatEndsAsItStartsIsSaidBeforeAnyRequest) {
  RewardCommand broken({"/bin/sh", "-c", "echo 'no module named judge' >&2; exit 4"}, 30);
  const std::string message = input_error_of([&] { broken.check_started(5.0); });
  EXPECT_NE(message.find("it exited with status 4 as it started, before any request"), std::string::npos) << message;
  const std::string later = input_error_of([&] { broken.score(requests(1)); });
  EXPECT_NE(later.find("unusable after an earlier error"), std::string::npos) << later;
  RewardCommand running({"/bin/sh", script("stderr_lines.sh")}, 30);
  const auto start = Clock::now();
  running.check_started(0.3);
  EXPECT_GE(seconds_since(start), 0.2);
  running.check_started(0.3);   // past the settle time: no wait
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(rewards_of(running.score(requests(2))), (std::vector<double>{0, 1}));
}

// A finite reward too large for the group's statistics (1e200 and 0 made every advantage 0).
TEST(RewardCommand, AHugeFiniteRewardIsRefused) {
  RewardCommand command({"/bin/sh", script("bad_reply.sh"), "{\"reward\": 1e200}"}, 30);
  const std::string message = input_error_of([&] { command.score(requests(2)); });
  EXPECT_NE(message.find("reply to request 1 of 2 (0-based): \"reward\" 1e+200 is beyond +-1e+06"), std::string::npos)
      << message;
  RewardCommand large({"/bin/sh", script("bad_reply.sh"), "{\"reward\": -1e6}"}, 30);
  EXPECT_EQ(rewards_of(large.score(requests(2))), (std::vector<double>{0, -1e6}));
}

// A request from a dataset is named by its line too; a reply's bytes quoted by the JSON parser's
// message are escaped (an invalid UTF-8 byte went into the log raw).
TEST(RewardCommand, ARequestIsNamedByItsDatasetLineAndParserQuotesAreEscaped) {
  RewardCommand command({"/bin/sh", script("bad_reply.sh"), "{\"reward\": \"\xff\"}"}, 30);
  std::vector<RewardRequest> batch = requests(2);
  batch[1].source = "data/train.jsonl:7";
  const std::string message = input_error_of([&] { command.score(batch); });
  EXPECT_NE(message.find("reply to request 1 of 2 (0-based; data/train.jsonl:7) is not JSON ("), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\xff'), std::string::npos) << message;
  EXPECT_NE(message.find("\\xff"), std::string::npos) << message;
}

TEST(RewardCommand, ExcerptOfAHugeBadReplyIsShortAndEscaped) {
  const std::string reply = "\x1b[31m" + std::string(10000, 'q');
  RewardCommand command({"/bin/sh", script("bad_reply.sh"), reply}, 30);
  const std::string message = input_error_of([&] { command.score(requests(2)); });
  EXPECT_NE(message.find("\\x1b[31mqqq"), std::string::npos) << message;
  EXPECT_LT(message.size(), 600u) << message;
}

TEST(RewardCommand, MoreRepliesThanRequestsIsAnError) {
  RewardCommand command({"/bin/sh", script("two_lines_per_request.sh")}, 30);
  const std::string message = input_error_of([&] { command.score(requests(1)); });
  EXPECT_NE(message.find("more output than requests"), std::string::npos) << message;
  EXPECT_NE(message.find("{\"reward\": 2}"), std::string::npos) << message;
}

TEST(RewardCommand, TimeoutEndsTheBatchInTime) {
  const double timeout_s = 1;
  RewardCommand command({"/bin/sh", script("sleeper.sh")}, timeout_s);
  const auto start = Clock::now();
  const std::string message = input_error_of([&] { command.score(requests(2)); });
  const double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, timeout_s);
  EXPECT_LT(elapsed, timeout_s + 2);
  EXPECT_NE(message.find("no reply to request 0 of 2 (0-based) within the timeout of 1 s"), std::string::npos)
      << message;
  EXPECT_NE(message.find("output after the last full line: \"{\"rew\""), std::string::npos) << message;
}

// A job stop that leaves no time (SIGTERM) gives up a batch waiting on a command that lives on
// through it: within the check's poll interval, not the batch's timeout.
TEST(RewardCommand, AGiveUpCheckEndsAWaitingBatchAtOnce) {
  RewardCommand command({"/bin/sh", script("sleeper.sh")}, 30);
  const auto start = Clock::now();
  command.give_up_when([&] { return seconds_since(start) > 0.3; });
  const std::string message = input_error_of([&] { command.score(requests(2)); });
  const double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, 0.3);
  EXPECT_LT(elapsed, 5.0) << "the batch waited for its timeout";
  EXPECT_NE(message.find("scoring given up with 0 of 2 replies: the job was asked to stop"), std::string::npos)
      << message;
}

TEST(RewardCommand, CommandThatCannotStartIsNamed) {
  const std::string missing = input_error_of([] { RewardCommand({"shardrl-no-such-reward-command", "x"}, 5); });
  EXPECT_NE(missing.find("cannot start reward command `shardrl-no-such-reward-command x`"), std::string::npos)
      << missing;
  EXPECT_NE(missing.find("No such file or directory (looked up in PATH)"), std::string::npos) << missing;

  const std::string not_executable = std::string(SHARDRL_SOURCE_DIR) + "/tests/CMakeLists.txt";
  const std::string denied = input_error_of([&] { RewardCommand({not_executable}, 5); });
  EXPECT_NE(denied.find(not_executable), std::string::npos) << denied;
  EXPECT_NE(denied.find("Permission denied"), std::string::npos) << denied;

  EXPECT_THROW(RewardCommand({}, 5), InputError);
  EXPECT_THROW(RewardCommand({"/bin/sh", script("polite.sh")}, 0), InputError);
}

TEST(RewardCommand, DestructionReapsAPoliteCommandAtOnce) {
  pid_t pid = 0;
  const auto start = Clock::now();
  {
    RewardCommand command({"/bin/sh", script("polite.sh")}, 30);
    pid = static_cast<pid_t>(rewards_of(command.score(requests(1))).at(0));
    EXPECT_FALSE(process_gone(pid));
  }
  EXPECT_LT(seconds_since(start), 1.5);
  EXPECT_TRUE(process_gone(pid));
}

TEST(RewardCommand, DestructionKillsACommandIgnoringEofAndSigterm) {
  pid_t pid = 0;
  std::optional<RewardCommand> command;
  command.emplace(std::vector<std::string>{"/bin/sh", script("stubborn.sh")}, 30);
  pid = static_cast<pid_t>(command->score(requests(1)).at(0).reward);
  const auto start = Clock::now();
  command.reset();
  const double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, 2.5);   // stdin EOF and SIGTERM were both given their grace
  EXPECT_LT(elapsed, 5.0);
  EXPECT_TRUE(process_gone(pid));
}

// Slurm's time-limit warning (SIGUSR1) reaches every process of a job step; the job finishes its
// iteration, scoring included, then saves. The command must survive it.
TEST(RewardCommand, TheJobsStopSignalsDoNotEndTheCommand) {
  RewardCommand command({"/bin/sh", script("polite.sh")}, 30);
  const pid_t pid = static_cast<pid_t>(rewards_of(command.score(requests(1))).at(0));
  for (int signal : {SIGUSR1, SIGUSR2}) ASSERT_EQ(::kill(pid, signal), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(rewards_of(command.score(requests(2))), (std::vector<double>{double(pid), double(pid)}));
}

// A stray line that comes after a batch's replies would be taken as the next batch's first reply:
// the next batch fails instead, naming it.
TEST(RewardCommand, ALateExtraLineIsAnErrorNotTheNextReply) {
  RewardCommand command({"/bin/sh", script("late_extra_line.sh")}, 30);
  EXPECT_EQ(rewards_of(command.score(requests(1))), std::vector<double>{1});
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const std::string message = input_error_of([&] { command.score(requests(1)); });
  EXPECT_NE(message.find("more output than requests: after the previous batch's last reply: \"{\"reward\": 2}"),
            std::string::npos)
      << message;
}

// What the command started and left running ends with it (its process group).
TEST(RewardCommand, DestructionEndsWhatTheCommandStarted) {
  pid_t child = 0;
  {
    RewardCommand command({"/bin/sh", script("leaves_a_child.sh")}, 30);
    child = static_cast<pid_t>(rewards_of(command.score(requests(1))).at(0));
    ASSERT_GT(child, 0);
    EXPECT_FALSE(process_gone(child));
  }
  const auto start = Clock::now();
  while (!process_ended(child) && seconds_since(start) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(process_ended(child)) << "the command's `sleep` outlived it";
}

TEST(RewardCommand, InheritsNoDescriptorOfTheJobButStdio) {
#if !(defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34)))
  GTEST_SKIP() << "needs posix_spawn_file_actions_addclosefrom_np (glibc 2.34)";
#endif
  if (::access("/proc/self/fd", F_OK) != 0) GTEST_SKIP() << "no /proc/self/fd";
  const int inheritable = ::dup(STDOUT_FILENO);   // dup leaves FD_CLOEXEC unset
  ASSERT_GE(inheritable, 3);
  RewardCommand probe_stderr({"/bin/sh", script("open_descriptor.sh"), "2"}, 30);
  RewardCommand probe_job_fd({"/bin/sh", script("open_descriptor.sh"), std::to_string(inheritable)}, 30);
  EXPECT_EQ(rewards_of(probe_stderr.score(requests(1))), std::vector<double>{1});
  EXPECT_EQ(rewards_of(probe_job_fd.score(requests(1))), std::vector<double>{0});
  ::close(inheritable);
}

TEST(RewardCommand, ExampleScriptRewardsTheLastNumber) {
  REQUIRE_PYTHON3();
  RewardCommand command({"python3", std::string(SHARDRL_SOURCE_DIR) + "/examples/reward_length.py"}, 30);
  const std::vector<Scored> scored =
      command.score({request("42", "6 times 7 is 42"), request("42", "42, no: 41"), request("3", "no idea")});
  const std::vector<double> rewards = rewards_of(scored);
  EXPECT_EQ(scored.at(0).pass, true) << "the right answer passes below a reward of 1";
  EXPECT_EQ(scored.at(1).pass, false);
  EXPECT_EQ(scored.at(2).pass, false);
  EXPECT_DOUBLE_EQ(rewards.at(0), 1.0 - 0.001 * 15);
  EXPECT_DOUBLE_EQ(rewards.at(1), 0.0 - 0.001 * 10);
  EXPECT_DOUBLE_EQ(rewards.at(2), 0.0 - 0.001 * 7);
}

}  // namespace
}  // namespace shardrl
