// The reward command (rl/reward_command.hpp): posix_spawn with three pipes, one poll loop that
// writes requests and reads replies at once, and a thread that forwards stderr to the log.
// Guarantees: no pipe deadlock, no SIGPIPE, no zombie, no child left running after destruction.
#include "rl/reward_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/errno_message.hpp"
#include "core/error.hpp"
#include "core/running_time.hpp"
#include "io/bounded_json.hpp"
#include "io/json_parse_message.hpp"
#include "rl/child_process.hpp"
#include "rl/log_line_budget.hpp"
#include "rl/owned_fd.hpp"

extern char** environ;

namespace shardrl {
namespace {

using Clock = std::chrono::steady_clock;

// A command may need a moment after stdin EOF (flush files, join workers) before SIGTERM.
constexpr auto kStdinGrace = std::chrono::seconds(2);
constexpr auto kTermGrace = std::chrono::seconds(1);
// After a crash shows as EOF on stdout, how long to wait for the exit status and the last
// stderr lines (a traceback) so that the log shows them before the error.
constexpr auto kCrashReportWait = std::chrono::seconds(1);
// A reply is a small object; a line without end is a broken command, not a reply to buffer.
constexpr std::size_t kMaxReplyBytes = std::size_t{16} << 20;
constexpr std::size_t kMaxLogLineBytes = 4096;
constexpr double kMaxReward = 1e6;
// A command that prints a line per request would fill the log; its last lines (a traceback) are
// kept whatever it printed before (rl/log_line_budget.hpp).
constexpr std::size_t kStderrLinesPerWindow = 50;
constexpr auto kStderrWindow = std::chrono::seconds(60);
constexpr std::size_t kStderrTailLines = 50;
constexpr std::size_t kWriteChunkBytes = std::size_t{1} << 16;
constexpr std::size_t kReadChunkBytes = std::size_t{1} << 16;

// The command for messages, as a shell would take it back: arguments quoted where they need it,
// each cut to an escaped excerpt (an argument may be a whole prompt template).
std::string quote_command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& full_arg : argv) {
    const std::string arg = excerpt(full_arg, 200);
    if (!out.empty()) out += ' ';
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./=:,+-@%", c) != nullptr;
    });
    if (plain) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

// Blocks signals in this thread for a scope.
class ScopedSignalBlock {
 public:
  explicit ScopedSignalBlock(const sigset_t& signals) { ::pthread_sigmask(SIG_BLOCK, &signals, &previous_); }
  ~ScopedSignalBlock() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  ScopedSignalBlock(const ScopedSignalBlock&) = delete;
  ScopedSignalBlock& operator=(const ScopedSignalBlock&) = delete;

 private:
  sigset_t previous_;
};

// Pipes have no MSG_NOSIGNAL, and the job may not ignore SIGPIPE: block it in this thread while
// writing, and swallow the SIGPIPE that a write to a closed pipe raised (EPIPE says it already),
// unless one was pending before.
class SigpipeGuard {
 public:
  SigpipeGuard() : block_(sigpipe_set()) {
    sigset_t pending;
    ::sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeGuard() {
    if (!raised_ || was_pending_) return;
    const sigset_t signals = sigpipe_set();
    const timespec no_wait{0, 0};
    while (::sigtimedwait(&signals, nullptr, &no_wait) < 0 && errno == EINTR) {}
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

  void note_epipe() { raised_ = true; }

 private:
  static sigset_t sigpipe_set() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGPIPE);
    return signals;
  }

  ScopedSignalBlock block_;
  bool was_pending_ = false, raised_ = false;
};

// posix_spawnp (vfork-like: safe in a multithreaded MPI process where fork is not), in a new
// process group. Slurm's time-limit warning (SIGUSR1) reaches every process of a job step, and a
// reward command that died of it would fail the iteration the job must finish and save: the
// child starts with SIGUSR1 and SIGUSR2 blocked (the mask survives exec, and so reaches what it
// starts: nothing ends a process with those). The terminating signals stay as a process has them
// (SIGTERM and SIGPIPE at their defaults, the rest unblocked), so that a reward that runs code can
// still stop it with `timeout` or Popen.terminate().
pid_t spawn_child(const std::vector<std::string>& argv, const std::string& command_line, int stdin_fd,
                  int stdout_fd, int stderr_fd) {
  struct FileActions {
    posix_spawn_file_actions_t actions;
    FileActions() { posix_spawn_file_actions_init(&actions); }
    ~FileActions() { posix_spawn_file_actions_destroy(&actions); }
  } files;
  struct Attributes {
    posix_spawnattr_t attr;
    Attributes() { posix_spawnattr_init(&attr); }
    ~Attributes() { posix_spawnattr_destroy(&attr); }
  } attributes;

  posix_spawn_file_actions_adddup2(&files.actions, stdin_fd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&files.actions, stdout_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&files.actions, stderr_fd, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors a library opened without O_CLOEXEC (MPI sockets, files) stay with the job: a
  // reward command holding them could keep a peer or a file open after the job ends.
  posix_spawn_file_actions_addclosefrom_np(&files.actions, 3);
#endif

  sigset_t the_jobs, defaults;
  sigemptyset(&the_jobs);
  sigaddset(&the_jobs, SIGUSR1);
  sigaddset(&the_jobs, SIGUSR2);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setflags(&attributes.attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes.attr, 0);
  posix_spawnattr_setsigmask(&attributes.attr, &the_jobs);
  posix_spawnattr_setsigdefault(&attributes.attr, &defaults);

  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, args[0], &files.actions, &attributes.attr, args.data(), environ);
  if (err != 0) {
    const bool searched = argv[0].find('/') == std::string::npos;
    throw InputError(fmt::format("cannot start reward command `{}`: {}: {}{}", command_line,
                                 excerpt(argv[0], 200), errno_message(err),
                                 searched ? " (looked up in PATH)" : ""));
  }
  return pid;
}

// Forwards the child's stderr to the log, line by line, from a thread of its own: a chatty
// command never blocks on a full pipe, between batches included. Longer lines than
// kMaxLogLineBytes are logged in pieces, within the budget above.
class StderrForwarder {
 public:
  explicit StderrForwarder(OwnedFd stderr_read)
      : stderr_(std::move(stderr_read)),
        wake_(make_pipe()),
        budget_(kStderrLinesPerWindow, kStderrWindow, kStderrTailLines) {
    set_nonblocking(stderr_.get());
    // Signals meant for the job (SIGTERM, SIGUSR1) go to its own threads, not to this one.
    sigset_t all;
    sigfillset(&all);
    ScopedSignalBlock block(all);
    thread_ = std::thread([this] { forward(); });
  }
  // Reads what is left without waiting for EOF (a grandchild may still hold the pipe), then joins.
  ~StderrForwarder() {
    const char byte = 1;
    while (::write(wake_.write_end.get(), &byte, 1) < 0 && errno == EINTR) {}
    thread_.join();
  }
  StderrForwarder(const StderrForwarder&) = delete;
  StderrForwarder& operator=(const StderrForwarder&) = delete;

  // Waits at most `limit` for the pipe to close (the command exited and its last lines are logged).
  void wait_closed(Clock::duration limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    closed_changed_.wait_for(lock, limit, [this] { return closed_; });
  }

 private:
  void forward() {
    std::string pending;
    char buffer[kReadChunkBytes];
    bool open = true;
    while (open) {
      pollfd fds[2] = {{stderr_.get(), POLLIN, 0}, {wake_.read_end.get(), POLLIN, 0}};
      if (::poll(fds, 2, poll_timeout_ms()) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      log_all(budget_.tick(Clock::now()));
      const bool stopping = fds[1].revents != 0;
      for (;;) {
        const ssize_t got = ::read(stderr_.get(), buffer, sizeof(buffer));
        if (got > 0) {
          pending.append(buffer, static_cast<std::size_t>(got));
          log_complete_lines(pending);
          continue;
        }
        if (got < 0 && errno == EINTR) continue;
        if (got == 0 || errno != EAGAIN) open = false;
        break;
      }
      if (stopping) open = false;
    }
    if (!pending.empty()) log_line(pending);
    log_all(budget_.close());
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    closed_changed_.notify_all();
  }

  // Until the budget's window with lines held back ends (its count is then logged), or forever.
  int poll_timeout_ms() const {
    const auto deadline = budget_.deadline();
    if (!deadline) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<decltype(left)>(left, 0, 60'000));
  }

  void log_complete_lines(std::string& pending) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t newline = pending.find('\n', start);
      if (newline == std::string::npos) break;
      log_line(std::string_view(pending).substr(start, newline - start));
      start = newline + 1;
    }
    while (pending.size() - start >= kMaxLogLineBytes) {
      log_line(std::string_view(pending).substr(start, kMaxLogLineBytes));
      start += kMaxLogLineBytes;
    }
    pending.erase(0, start);
  }

  void log_line(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    log_all(budget_.line(line, Clock::now()));
  }

  static void log_all(const std::vector<std::string>& lines) {
    // default_logger() takes the registry's lock: safe against init_logging replacing the
    // logger while this thread logs, which spdlog::warn (a raw pointer) is not.
    for (const std::string& line : lines) spdlog::default_logger()->warn("reward command: {}", line);
  }

  OwnedFd stderr_;
  Pipe wake_;
  LogLineBudget budget_;   // the forwarding thread's alone
  std::mutex mutex_;
  std::condition_variable closed_changed_;
  bool closed_ = false;
  std::thread thread_;
};

std::string encode_request(const RewardRequest& request) {
  nlohmann::json line = {{"prompt", request.prompt},
                         {"completion", request.completion},
                         {"answer", request.answer},
                         {"metadata", request.metadata}};
  // Completions are model output: invalid UTF-8 becomes U+FFFD rather than an exception.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// The running command: its pid, our ends of its stdin and stdout (non-blocking) and the stderr
// forwarder. Destruction ends the command (see ~RewardCommand).
class RewardCommand::Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& command_line)
      : command_line_(command_line) {
    Pipe to_child = make_pipe(), from_child = make_pipe(), errors = make_pipe();
    child_.adopt(spawn_child(argv, command_line, to_child.read_end.get(), from_child.write_end.get(),
                             errors.write_end.get()));
    // The child's ends close here, at scope exit: only then do EOF and EPIPE reach us.
    stdin_ = std::move(to_child.write_end);
    stdout_ = std::move(from_child.read_end);
    set_nonblocking(stdin_.get());
    set_nonblocking(stdout_.get());
    stderr_ = std::make_unique<StderrForwarder>(std::move(errors.read_end));
  }

  ~Process() {
    // Closing stdout too makes a command blocked on a full stdout pipe (after a failed batch)
    // get EPIPE and end.
    stdin_.reset();
    stdout_.reset();
    if (!child_.wait_exit(kStdinGrace)) {
      child_.signal_group(SIGTERM);
      child_.wait_exit(kTermGrace);
    }
    child_.end_group_and_reap();   // the leader, and what it started and left running
    stderr_.reset();
  }

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  std::vector<Scored> exchange(const std::vector<RewardRequest>& batch, double timeout_s,
                               const std::function<bool()>& give_up);

  // How it ended, when it has within `limit` (its last stderr lines logged first); else "".
  std::string ended_within(Clock::duration limit) {
    if (!child_.wait_exit(limit)) return "";
    stderr_->wait_closed(kCrashReportWait);
    return child_.exit_description();
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(fmt::format("reward command `{}`: {}", command_line_, problem));
  }
  Scored parse_reply(std::string_view line, const std::vector<RewardRequest>& batch, std::size_t index) const;

  std::string command_line_;
  ChildProcess child_;
  OwnedFd stdin_, stdout_;
  std::unique_ptr<StderrForwarder> stderr_;
};

namespace {
// "request 3 of 16 (0-based; data/train.jsonl:7)": its place in the batch, and the example's
// where the caller named it.
std::string request_name(const std::vector<RewardRequest>& batch, std::size_t index) {
  const std::string& source = index < batch.size() ? batch[index].source : std::string();
  return fmt::format("request {} of {} (0-based{})", index, batch.size(), source.empty() ? "" : "; " + source);
}
}  // namespace

Scored RewardCommand::Process::parse_reply(std::string_view line, const std::vector<RewardRequest>& batch,
                                           std::size_t index) const {
  const std::string where = "reply to " + request_name(batch, index);
  const std::string quoted = "\"" + excerpt(line) + "\"";
  nlohmann::json reply;
  try {
    // Bounded, and a key given twice refused ({"reward": 1, "reward": 0} took the last silently).
    reply = parse_bounded_json<nlohmann::json>(std::string(line), where);
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("{} is not JSON ({}): {}", where, json_parse_message(e.what()), quoted));
  } catch (const InputError& e) {
    fail(fmt::format("{}: {}", e.what(), quoted));
  }
  if (!reply.is_object()) fail(fmt::format("{} is a JSON {}, not an object: {}", where, reply.type_name(), quoted));
  const auto reward = reply.find("reward");
  if (reward == reply.end()) fail(fmt::format("{} has no \"reward\": {}", where, quoted));
  if (!reward->is_number())
    fail(fmt::format("{}: \"reward\" is a {}, not a number: {}", where, reward->type_name(), quoted));
  const double value = reward->get<double>();
  if (!std::isfinite(value)) fail(fmt::format("{}: \"reward\" is not finite: {}", where, quoted));
  // Past this a group's sums of squares overflow (every advantage 0: a perfect signal trained
  // nothing) or its advantages overflow fp32; a reward that large is a broken command.
  if (std::abs(value) > kMaxReward)
    fail(fmt::format("{}: \"reward\" {} is beyond +-{:g}, the largest a reward may be: {}", where, value, kMaxReward,
                     quoted));
  const auto pass = reply.find("pass");
  if (pass == reply.end()) return Scored::of(value);
  // Said by the command: a boolean only (0/1 or "yes" would be a guess at what was meant).
  if (!pass->is_boolean())
    fail(fmt::format("{}: \"pass\" is a {}, not true or false: {}", where, pass->type_name(), quoted));
  return Scored{value, pass->get<bool>()};
}

// Writes the batch and reads the replies at once: a command that answers each line before it
// reads the next would otherwise block on a full stdout pipe while we block on its full stdin.
// Requests are encoded a chunk at a time, so a batch never exists twice in memory.
std::vector<Scored> RewardCommand::Process::exchange(const std::vector<RewardRequest>& batch,
                                                     double timeout_s, const std::function<bool()>& give_up) {
  const std::size_t count = batch.size();
  // The timeout counts running time: a suspended job (core/running_time.hpp) stops the command
  // with it, and must not find it late when it continues.
  RunningTime running;
  double limit_s = timeout_s;
  bool stdin_closed_by_child = false;
  SigpipeGuard sigpipe_guard;
  // Output that came after the previous batch's last reply (a late extra line) would be taken as
  // this batch's first reply: it is an error, found before anything is written.
  {
    char stray[512];
    ssize_t got;
    while ((got = ::read(stdout_.get(), stray, sizeof(stray))) < 0 && errno == EINTR) {}
    if (got > 0)
      fail(fmt::format("more output than requests: after the previous batch's last reply: \"{}\"",
                       excerpt(std::string(stray, static_cast<std::size_t>(got)))));
  }

  std::vector<Scored> rewards;
  rewards.reserve(count);
  std::string outgoing;            // encoded requests not yet written, from outgoing_pos
  std::size_t outgoing_pos = 0, next_to_encode = 0;
  std::string incoming;            // bytes of replies not yet complete
  std::size_t scanned = 0;         // incoming[0, scanned) holds no newline
  std::vector<char> buffer(kReadChunkBytes);

  auto refill = [&] {
    if (outgoing_pos < outgoing.size()) return;
    outgoing.clear();
    outgoing_pos = 0;
    while (next_to_encode < count && outgoing.size() < kWriteChunkBytes) {
      outgoing += encode_request(batch[next_to_encode++]);
      outgoing += '\n';
    }
  };
  auto unterminated_output = [&] {
    return incoming.empty() ? std::string() : fmt::format("; output after the last full line: \"{}\"", excerpt(incoming));
  };

  for (;;) {
    refill();
    const bool writing = !stdin_closed_by_child && outgoing_pos < outgoing.size();
    if (rewards.size() == count) {
      if (writing)
        fail(fmt::format("more output than requests: it replied {} times before reading all {} requests{}",
                         count, count, unterminated_output()));
      if (!incoming.empty())
        fail(fmt::format("more output than requests: after the reply to the last of {} requests: \"{}\"",
                         count, excerpt(incoming)));
      return rewards;
    }

    if (give_up && give_up())
      fail(fmt::format("scoring given up with {} of {} replies: the job was asked to stop", rewards.size(), count));
    const double left_s = limit_s - running.seconds();
    if (left_s <= 0) {
      if (stdin_closed_by_child) {
        child_.wait_exit(Clock::duration::zero());   // whether it has exited by now, for the message
        fail(fmt::format("stopped reading its stdin and {}, with no reply to {}{}", child_.exit_description(),
                         request_name(batch, rewards.size()), unterminated_output()));
      }
      fail(fmt::format("no reply to {} within the timeout of {:g} s (each reply must end with a "
                       "newline and be flushed){}",
                       request_name(batch, rewards.size()), timeout_s, unterminated_output()));
    }
    // At most a second a poll, so that a stop of the process shows as a gap in `running`.
    const int wait_ms = static_cast<int>(std::ceil(std::min(left_s, 1.0) * 1000));

    pollfd fds[2];
    nfds_t nfds = 0;
    fds[nfds++] = {stdout_.get(), POLLIN, 0};
    if (writing) fds[nfds++] = {stdin_.get(), POLLOUT, 0};
    const int ready =
        ::poll(fds, nfds, give_up ? std::min<int>(wait_ms, kGiveUpPollMs) : wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail("poll: " + errno_message(errno));
    }

    if (writing && fds[1].revents != 0) {
      while (outgoing_pos < outgoing.size()) {
        const ssize_t put = ::write(stdin_.get(), outgoing.data() + outgoing_pos, outgoing.size() - outgoing_pos);
        if (put > 0) {
          outgoing_pos += static_cast<std::size_t>(put);
          refill();
          continue;
        }
        if (put < 0 && errno == EINTR) continue;
        if (put < 0 && errno == EAGAIN) break;
        if (put < 0 && errno != EPIPE) fail("writing to its stdin: " + errno_message(errno));
        // The command closed its stdin (most likely it exited): read what it said before, and
        // report its exit; a command that goes on running without input gets a short while.
        sigpipe_guard.note_epipe();
        stdin_closed_by_child = true;
        limit_s = std::min(limit_s, running.seconds() + std::chrono::duration<double>(kCrashReportWait).count());
        break;
      }
    }

    if (fds[0].revents == 0) continue;
    bool stdout_closed = false;
    for (std::size_t read_total = 0; read_total < 16 * kReadChunkBytes;) {
      const ssize_t got = ::read(stdout_.get(), buffer.data(), buffer.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EAGAIN) break;
      if (got < 0) fail("reading its stdout: " + errno_message(errno));
      if (got == 0) {
        stdout_closed = true;
        break;
      }
      read_total += static_cast<std::size_t>(got);
      incoming.append(buffer.data(), static_cast<std::size_t>(got));
    }

    std::size_t start = 0;
    for (;;) {
      const std::size_t newline = incoming.find('\n', std::max(start, scanned));
      if (newline == std::string::npos) break;
      const std::string_view line = std::string_view(incoming).substr(start, newline - start);
      if (rewards.size() == count)
        fail(fmt::format("more output than requests: after the reply to the last of {} requests: \"{}\"",
                         count, excerpt(line)));
      rewards.push_back(parse_reply(line, batch, rewards.size()));
      start = newline + 1;
    }
    incoming.erase(0, start);
    scanned = incoming.size();
    if (incoming.size() > kMaxReplyBytes)
      fail(fmt::format("reply to {} is longer than {} MiB without a newline: \"{}\"",
                       request_name(batch, rewards.size()), kMaxReplyBytes >> 20, excerpt(incoming)));

    // The replies that came before EOF count; a command that answered the whole batch and then
    // exited is reported by the next batch.
    if (stdout_closed && (rewards.size() < count || !incoming.empty())) {
      child_.wait_exit(kCrashReportWait);
      stderr_->wait_closed(kCrashReportWait);   // its traceback reaches the log first
      fail(fmt::format("{} before replying to {}{}",
                       child_.exited() ? child_.exit_description() : std::string("closed its stdout"),
                       request_name(batch, rewards.size()), unterminated_output()));
    }
  }
}

RewardCommand::RewardCommand(std::vector<std::string> argv, double timeout_s)
    : command_line_(quote_command_line(argv)), timeout_s_(timeout_s) {
  if (argv.empty() || argv[0].empty())
    throw InputError("reward command: no program given (rl.reward_command is empty)");
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    throw InputError(fmt::format("reward command `{}`: the timeout must be a positive number of seconds, got {}",
                                 command_line_, timeout_s));
  process_ = std::make_unique<Process>(argv, command_line_);
  started_ = std::chrono::steady_clock::now();
}

RewardCommand::~RewardCommand() = default;
void RewardCommand::check_started(double settle_s) {
  SHARDRL_CHECK(process_ != nullptr, "RewardCommand used after it was moved from");
  if (!failure_.empty()) return;
  const auto settle = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settle_s));
  const std::string ended = process_->ended_within(std::max(Clock::duration::zero(), started_ + settle - Clock::now()));
  if (ended.empty()) return;
  failure_ = fmt::format("it {} as it started, before any request (its stderr is in the log above)", ended);
  throw InputError(fmt::format("reward command `{}`: {}", command_line_, failure_));
}

RewardCommand::RewardCommand(RewardCommand&&) noexcept = default;
RewardCommand& RewardCommand::operator=(RewardCommand&&) noexcept = default;

std::vector<Scored> RewardCommand::score(const std::vector<RewardRequest>& batch) {
  if (!failure_.empty())
    throw InputError(fmt::format("reward command `{}` is unusable after an earlier error: {}", command_line_, failure_));
  SHARDRL_CHECK(process_ != nullptr, "RewardCommand used after it was moved from");
  if (batch.empty()) return {};
  try {
    return process_->exchange(batch, timeout_s_, give_up_);
  } catch (const InputError& e) {
    failure_ = e.what();
    throw;
  }
}

}  // namespace shardrl
