// Fatal-error reporting shared by every check macro in the project.
#include "core/error.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/child_groups.hpp"
#include "core/log.hpp"

namespace shardrl {
namespace {
int g_rank = -1;
std::string g_host;
JobAbortFn g_abort = nullptr;

std::string local_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}
}  // namespace

void set_error_origin(int rank, std::string host) {
  g_rank = rank;
  g_host = std::move(host);
}
int error_origin_rank() { return g_rank; }
const std::string& error_origin_host() {
  if (g_host.empty()) g_host = local_hostname();
  return g_host;
}

void set_job_abort(JobAbortFn abort_fn) { g_abort = abort_fn; }

std::string origin_string() {
  std::string rank = g_rank >= 0 ? std::to_string(g_rank) : std::string("?");
  return "rank " + rank + " (host " + error_origin_host() + ")";
}

std::string excerpt(std::string_view text, std::size_t max_bytes) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

void print_error(std::string_view message) {
  const std::string msg = "shardrl: " + std::string(message) + "\n";
  flush_logging();
  std::fflush(stdout);
  std::cerr << msg << std::flush;
}

void print_fatal(std::string_view what) {
  // One write per message so lines from different ranks do not interleave mid-line.
  const std::string msg = "shardrl: fatal error on " + origin_string() + ": " + std::string(what) + "\n";
  // The lines logged before the error first (an abort ends the writer thread with the process),
  // within a deadline: a stdout that nobody reads must not keep the job from ending.
  flush_logging();
  std::fflush(stdout);
  std::cerr << msg << std::flush;
}

void fatal(std::string_view what, const char* file, int line) {
  print_fatal(std::string(what) + " [" + file + ":" + std::to_string(line) + "]");
  kill_child_groups();   // neither the abort nor _Exit runs the destructors that would
  if (g_abort) g_abort(kExitFatal);
  std::_Exit(kExitFatal);
}

}  // namespace shardrl
