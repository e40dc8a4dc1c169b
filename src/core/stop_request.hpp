// A request to stop the job cleanly: SIGUSR1 (Slurm's --signal warning before the time limit)
// or SIGTERM (scancel, preemption, the hard time limit). The handler only sets a flag. The job
// checks it between steps and iterations, agrees across ranks, saves a checkpoint and exits with
// kExitStoppedBySignal; SIGTERM, which leaves only Slurm's KillWait, also gives up a rollout or
// evaluation in progress (app/train_command.cpp).
#pragma once

namespace shardrl {

void install_stop_handlers();
bool stop_requested();
// The signal that asked to stop, or 0: SIGTERM once it has come (before or after a SIGUSR1),
// else SIGUSR1.
int stop_signal();

}  // namespace shardrl
