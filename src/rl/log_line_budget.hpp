// Which of a child process's stderr lines reach the job's log. A reward command that prints a
// line per request would otherwise put a million lines a run into the log, burying the job's
// own; yet its last words before it ends (a traceback) are the ones a user needs. So: the first
// `lines_per_window` lines of each window are logged as they come; the rest are counted, the
// last `tail_lines` of them held; a window's end logs how many were held back and drops them;
// the child's end (EOF on the pipe) logs the count and the held lines, its last words.
// Header-only, no clock of its own: the caller passes the time, so tests step it.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace shardrl {

class LogLineBudget {
 public:
  using Clock = std::chrono::steady_clock;

  LogLineBudget(std::size_t lines_per_window, Clock::duration window, std::size_t tail_lines)
      : lines_per_window_(lines_per_window), window_(window), tail_lines_(tail_lines) {}

  // The messages to log for a line that arrived at `now`, in order: a closed window's count
  // first, then the line itself while within the budget.
  std::vector<std::string> line(std::string_view text, Clock::time_point now) {
    std::vector<std::string> out = tick(now);
    if (!window_start_) window_start_ = now;
    if (logged_ < lines_per_window_) {
      ++logged_;
      out.emplace_back(text);
      return out;
    }
    ++held_back_;
    held_.emplace_back(text);
    if (held_.size() > tail_lines_) held_.pop_front();
    return out;
  }

  // At or after deadline(): the count of the window's lines that were not logged.
  std::vector<std::string> tick(Clock::time_point now) {
    std::vector<std::string> out;
    if (!window_start_ || now - *window_start_ < window_) return out;
    if (held_back_ > 0) out.push_back(held_back_message());
    window_start_.reset();
    logged_ = 0;
    held_back_ = 0;
    held_.clear();
    return out;
  }

  // When tick() has a count to log: the end of a window with lines held back.
  std::optional<Clock::time_point> deadline() const {
    if (!window_start_ || held_back_ == 0) return std::nullopt;
    return *window_start_ + window_;
  }

  // The child's end: the count of the lines not logged and the last of them.
  std::vector<std::string> close() {
    std::vector<std::string> out;
    if (held_back_ == 0) return out;
    out.push_back(fmt::format("[{} more stderr line{} not logged; the last {}, before its stderr closed:]", held_back_,
                              held_back_ == 1 ? "" : "s", held_.size()));
    for (std::string& text : held_) out.push_back(std::move(text));
    held_.clear();
    held_back_ = 0;
    return out;
  }

 private:
  std::string held_back_message() const {
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(window_).count();
    return fmt::format("[{} more stderr line{} not logged: at most {} in {} s are, and the last {} before it ends]",
                       held_back_, held_back_ == 1 ? "" : "s", lines_per_window_, seconds, tail_lines_);
  }

  std::size_t lines_per_window_;
  Clock::duration window_;
  std::size_t tail_lines_;
  std::optional<Clock::time_point> window_start_;   // the first line's arrival; none between windows
  std::size_t logged_ = 0;
  std::size_t held_back_ = 0;
  std::deque<std::string> held_;   // the last tail_lines_ of those held back
};

}  // namespace shardrl
