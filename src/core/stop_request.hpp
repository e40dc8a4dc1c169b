// A request to stop the job cleanly: SIGUSR1 (Slurm's --signal warning before the time limit)
// or SIGTERM (scancel, preemption). The handler only sets a flag; the job checks it between
// iterations, agrees across ranks, saves a checkpoint and exits with kExitStoppedBySignal.
#pragma once

namespace shardrl {

void install_stop_handlers();
bool stop_requested();
// For tests: the number of the signal that asked to stop, or 0.
int stop_signal();

}  // namespace shardrl
