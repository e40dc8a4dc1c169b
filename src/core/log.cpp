// The process-wide logger of log.hpp: an spdlog asynchronous logger whose one writer thread
// writes each line to stdout's file descriptor, and a bounded wait for that thread.
#include "core/log.hpp"

#include <spdlog/async.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/sink.h>

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace shardrl {
namespace {

// Lines the queue holds while stdout lags: a start-up's reports (config table, devices, build,
// memory) are a few hundred lines. A slot is 408 bytes (a line of up to 250 characters in place),
// allocated up front: 3.2 MiB per rank.
constexpr std::size_t kQueueLines = 8192;

// Writes each line straight to a file descriptor with write(2). No stdio buffer: exit() flushes
// every stdio stream, and one holding a line for a pipe nobody reads would block the exit forever.
// One write per line, colour codes included, so lines of processes sharing a pipe stay whole
// (a pipe takes a write of up to PIPE_BUF = 4096 bytes at once).
class FdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  FdSink(int fd, bool colour) : fd_(fd), colour_(colour) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    msg.color_range_start = 0;
    msg.color_range_end = 0;
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    const std::string_view text(formatted.data(), formatted.size());
    if (!colour_ || msg.color_range_end <= msg.color_range_start) return write_all(text);
    std::string line;
    line.reserve(text.size() + 16);
    line.append(text.substr(0, msg.color_range_start));
    line.append(level_colour(msg.level));
    line.append(text.substr(msg.color_range_start, msg.color_range_end - msg.color_range_start));
    line.append("\033[m");
    line.append(text.substr(msg.color_range_end));
    write_all(line);
  }

  void flush_() override {}   // nothing is kept back

 private:
  // spdlog's own console colours (sinks/ansicolor_sink-inl.h), so a terminal looks as before.
  static std::string_view level_colour(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace: return "\033[37m";
      case spdlog::level::debug: return "\033[36m";
      case spdlog::level::info: return "\033[32m";
      case spdlog::level::warn: return "\033[33m\033[1m";
      case spdlog::level::err: return "\033[31m\033[1m";
      case spdlog::level::critical: return "\033[1m\033[41m";
      default: return "";
    }
  }

  // Only the writer thread gets here, so waiting on stdout holds up nobody. A stdout that is gone
  // (closed, EPIPE) loses the line, as stdio's fwrite did.
  void write_all(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::write(fd_, text.data(), text.size());
      if (n >= 0) {
        text.remove_prefix(static_cast<std::size_t>(n));
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {   // a stdout someone made non-blocking
        pollfd ready{fd_, POLLOUT, 0};
        ::poll(&ready, 1, -1);
      } else if (errno != EINTR) {
        return;
      }
    }
  }

  int fd_;
  bool colour_;
};

// flush_logging's tickets: a marker logged behind the lines carries its ticket number, and the
// writer thread reaching it means every line queued before it has been written. The highest
// ticket reached, not a count, so a marker dropped from a full queue does not leave later ones
// waiting for it.
struct FlushTickets {
  std::mutex mutex;
  std::condition_variable reached_changed;
  std::uint64_t issued = 0, reached = 0;
};

class FlushMarkerSink final : public spdlog::sinks::sink {
 public:
  explicit FlushMarkerSink(FlushTickets& tickets) : tickets_(tickets) {}

  void log(const spdlog::details::log_msg& msg) override {
    std::uint64_t ticket = 0;
    std::from_chars(msg.payload.data(), msg.payload.data() + msg.payload.size(), ticket);
    std::lock_guard<std::mutex> lock(tickets_.mutex);
    if (ticket > tickets_.reached) tickets_.reached = ticket;
    tickets_.reached_changed.notify_all();
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}

 private:
  FlushTickets& tickets_;
};

struct LogState {
  std::mutex mutex;   // the pool, the marker and unformatted loggers, made by the first init_logging
  std::shared_ptr<spdlog::details::thread_pool> pool;
  std::shared_ptr<spdlog::async_logger> flush_marker;
  std::shared_ptr<spdlog::async_logger> unformatted;
  FlushTickets tickets;
};

// Never destroyed: the pool's destructor queues a stop and joins the writer thread, which a stdout
// nobody reads holds in write(2) forever (and a full queue would hold the destructor itself).
// Left alone, the thread ends with the process.
LogState& log_state() {
  static LogState* const state = new LogState;
  return *state;
}

void flush_at_exit() { flush_logging(); }

}  // namespace

void init_logging(int rank, bool all_ranks) {
  // Colour only on a real terminal. Under mpirun or srun every rank's stdout is a pipe or a
  // pseudo-terminal of the launcher, whose own output usually goes to a file: no colour there.
  bool launched = std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("PMIX_RANK") ||
                  std::getenv("SLURM_PROCID");
  bool colour = !launched && !std::getenv("NO_COLOR") && isatty(STDOUT_FILENO);
  LogState& state = log_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.pool) {
    state.pool = std::make_shared<spdlog::details::thread_pool>(kQueueLines, 1);
    state.flush_marker =
        std::make_shared<spdlog::async_logger>("shardrl-flush", std::make_shared<FlushMarkerSink>(state.tickets),
                                               state.pool, spdlog::async_overflow_policy::overrun_oldest);
    state.flush_marker->set_level(spdlog::level::trace);   // not in spdlog's registry: spdlog::set_level misses it
    // Its own sink: a logger's pattern is its sinks' formatter.
    state.unformatted = std::make_shared<spdlog::async_logger>(
        "shardrl-unformatted", std::make_shared<FdSink>(STDOUT_FILENO, false), state.pool,
        spdlog::async_overflow_policy::overrun_oldest);
    state.unformatted->set_formatter(
        std::make_unique<spdlog::pattern_formatter>("%v", spdlog::pattern_time_type::local, std::string()));
    state.unformatted->set_level(spdlog::level::trace);
    // Every way out through exit() (a return from main included) gives the queue its deadline.
    std::atexit(flush_at_exit);
  }
  // The lines of a logger replaced by a second call are in the same queue: they still arrive.
  auto logger = std::make_shared<spdlog::async_logger>("shardrl", std::make_shared<FdSink>(STDOUT_FILENO, colour),
                                                       state.pool, spdlog::async_overflow_policy::overrun_oldest);
  std::string prefix = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
  logger->set_pattern("[%H:%M:%S.%e] %^%l%$ " + prefix + "%v");
  logger->set_level((rank <= 0 || all_ranks) ? spdlog::level::info : spdlog::level::warn);
  // No flush_on: the sink writes each line as it comes, keeping nothing to flush.
  spdlog::set_default_logger(logger);
}

bool flush_logging(std::chrono::milliseconds deadline) {
  LogState& state = log_state();
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (!state.flush_marker) return true;
    {
      std::lock_guard<std::mutex> tickets_lock(state.tickets.mutex);
      ticket = ++state.tickets.issued;
    }
    // Queued behind every line logged so far, in ticket order (under state.mutex); never waits.
    state.flush_marker->info("{}", ticket);
  }
  std::unique_lock<std::mutex> lock(state.tickets.mutex);
  return state.tickets.reached_changed.wait_for(lock, deadline, [&] { return state.tickets.reached >= ticket; });
}

void log_unformatted(std::string_view text) {
  std::shared_ptr<spdlog::async_logger> logger;
  {
    LogState& state = log_state();
    std::lock_guard<std::mutex> lock(state.mutex);
    logger = state.unformatted;
  }
  if (logger) return logger->info("{}", text);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace shardrl
