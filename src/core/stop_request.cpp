#include "core/stop_request.hpp"

#include <csignal>

namespace shardrl {
namespace {
volatile std::sig_atomic_t g_signal = 0;
// SIGTERM, once it came, stays the answer: a SIGUSR1 after it (Slurm's warning forwarded late)
// must not turn a stop that leaves no time back into one that finishes the iteration.
extern "C" void on_stop_signal(int signal) {
  if (g_signal != SIGTERM) g_signal = signal;
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }

}  // namespace shardrl
