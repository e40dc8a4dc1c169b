#include "core/stop_request.hpp"

#include <csignal>

namespace shardrl {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int signal) { g_signal = signal; }
}  // namespace

void install_stop_handlers() {
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }

}  // namespace shardrl
