#include "core/progress_meter.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/log.hpp"

namespace shardrl {
namespace {

bool g_enabled = false;
double g_after_s = 2.0;
std::function<void()> g_on_advance;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void ProgressMeter::enable(double after_s) {
  g_enabled = true;
  g_after_s = after_s;
}

bool ProgressMeter::enabled() { return g_enabled; }

void ProgressMeter::on_advance(std::function<void()> hook) { g_on_advance = std::move(hook); }

ProgressMeter::ProgressMeter(std::string what, std::int64_t total)
    : what_(std::move(what)), total_(std::max<std::int64_t>(total, 1)), start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressMeter::~ProgressMeter() {
  if (!drawn_) return;
  log_unformatted(fmt::format("\r{}: done in {:.1f} s{:30}\n", what_, seconds(std::chrono::steady_clock::now() - start_),
                              ""));
}

void ProgressMeter::advance(std::int64_t n) {
  done_ = std::min(total_, done_ + n);
  if (g_on_advance) g_on_advance();
  if (!g_enabled) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = seconds(now - start_);
  // Quiet for the first seconds, then at most a few redraws a second.
  if (elapsed < g_after_s || (drawn_ && seconds(now - last_draw_) < 0.25 && done_ < total_)) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done_ / total_);
  const double eta = done_ > 0 ? elapsed / double(done_) * double(total_ - done_) : 0.0;
  const std::string line = fmt::format("\r{}: [{}{}] {:3d}% {:.1f} s, {:.0f} s left", what_, std::string(filled, '#'),
                                       std::string(kWidth - filled, ' '), static_cast<int>(100 * done_ / total_),
                                       elapsed, eta);
  log_unformatted(line);
  drawn_ = true;
  last_draw_ = now;
}

}  // namespace shardrl
