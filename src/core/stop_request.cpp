#include "core/stop_request.hpp"

#include <csignal>

namespace shardrl {
namespace {
// One flag a signal, each only ever set: SIGTERM, once it came, stays the answer whatever comes
// after it (a SIGUSR1 forwarded late must not turn a stop that leaves no time back into one that
// finishes the iteration), with no read-then-write a second handler could interleave with.
volatile std::sig_atomic_t g_usr1 = 0;
volatile std::sig_atomic_t g_term = 0;
extern "C" void on_stop_signal(int signal) {
  if (signal == SIGTERM)
    g_term = 1;
  else
    g_usr1 = 1;
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_term != 0 || g_usr1 != 0; }
int stop_signal() { return g_term ? SIGTERM : (g_usr1 ? SIGUSR1 : 0); }

}  // namespace shardrl
