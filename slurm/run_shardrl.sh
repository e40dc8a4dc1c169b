#!/usr/bin/env bash
# One `shardrl train` job step inside a Slurm batch job, made to outlive the job's time limit.
# The batch scripts (train.sbatch, cpu.sbatch) exec this, so it is the batch shell that Slurm's
# warning signal (#SBATCH --signal=B:USR1@<seconds>) reaches. It forwards the signal to every rank;
# the ranks finish the current iteration, save a checkpoint and exit with 3; then this script
# requeues the job. The requeued job runs this script again, and `shardrl train` resumes from the
# run's latest checkpoint on its own, on however many ranks the job now has.
#
#   run_shardrl.sh CONFIG.toml [more `shardrl train` arguments, e.g. --set key=value]
#
# Environment:
#   SHARDRL_BIN            the shardrl binary (default: shardrl on PATH)
#   SHARDRL_LAUNCHER       srun (default: srun --mpi=pmix) or mpirun (Open MPI's, inside the allocation)
#   SHARDRL_MAX_REQUEUES   requeue at most this many times (default 100): a job whose every run is
#                          stopped before it gets anywhere must not requeue forever
# Exit status: shardrl's (0 done, 1 failed, 2 bad input, 3 stopped by a signal and not requeued).
set -uo pipefail

log() { echo "run_shardrl: $(date '+%F %T') job ${SLURM_JOB_ID:-?}: $*"; }

if [[ $# -lt 1 ]]; then
  echo "usage: run_shardrl.sh CONFIG.toml [shardrl train arguments...]" >&2
  exit 2
fi
if [[ -z ${SLURM_JOB_ID:-} ]]; then
  echo "run_shardrl.sh: not inside a Slurm job (submit slurm/train.sbatch or slurm/cpu.sbatch with sbatch)" >&2
  exit 2
fi
config=$1
shift
if [[ ! -f $config ]]; then
  echo "run_shardrl.sh: config file '$config' not found (relative paths are taken from $(pwd))" >&2
  exit 2
fi
bin=${SHARDRL_BIN:-$(command -v shardrl || true)}
if [[ -z $bin || ! -x $bin ]]; then
  echo "run_shardrl.sh: no shardrl binary: set SHARDRL_BIN (got '${SHARDRL_BIN:-}') or put shardrl on PATH" >&2
  exit 2
fi

case ${SHARDRL_LAUNCHER:-srun} in
  # --kill-on-bad-exit: a rank that dies takes the step down instead of leaving the others
  # waiting in a collective. Ranks that stop on a signal return only after the checkpoint is
  # committed on every rank, so this never cuts a save short.
  srun) launcher=(srun --mpi=pmix --kill-on-bad-exit=1) ;;
  # Open MPI's mpirun reads the allocation itself (one rank per task) and forwards SIGUSR1.
  mpirun) launcher=(mpirun) ;;
  *) echo "run_shardrl.sh: SHARDRL_LAUNCHER must be srun or mpirun, not '$SHARDRL_LAUNCHER'" >&2; exit 2 ;;
esac

restarts=${SLURM_RESTART_COUNT:-0}
log "run $((restarts + 1)) of the job on ${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_NTASKS:-?} task(s): $bin train --config $config $*"

# The warning (USR1) means: save and come back; Slurm sends it to this shell only (B:), so it is
# forwarded to the step (srun and Open MPI's mpirun both pass SIGUSR1 on to every rank). TERM
# (scancel, the hard time limit, preemption) reaches every process of the job from Slurm directly
# and means: save and stop. Trapping it keeps this shell alive until the ranks have saved.
warned=0
step=
on_usr1() {
  warned=1
  log "got SIGUSR1 (time limit near): asking the ranks to save a checkpoint and stop"
  [[ -n $step ]] && kill -s USR1 "$step" 2>/dev/null
}
trap on_usr1 USR1
trap 'log "got SIGTERM: the ranks got it too; waiting for them to save and stop"' TERM

"${launcher[@]}" "$bin" train --config "$config" "$@" &
step=$!
[[ $warned -eq 1 ]] && kill -s USR1 "$step" 2>/dev/null   # a warning that came before $! was known
# `wait` returns early (status > 128) when a trapped signal arrives; keep waiting for the step.
while true; do
  wait "$step"
  status=$?
  kill -0 "$step" 2>/dev/null || break
done

case $status in
  0) log "finished" ;;
  3)
    if [[ $warned -eq 0 ]]; then
      log "stopped by SIGTERM after saving a checkpoint: not requeued (resubmit to continue)"
    elif ((restarts >= ${SHARDRL_MAX_REQUEUES:-100})); then
      log "stopped after saving a checkpoint; not requeued: the job has been requeued $restarts times (SHARDRL_MAX_REQUEUES)"
    elif scontrol requeue "$SLURM_JOB_ID"; then
      log "checkpoint saved; requeued: the next run resumes from it"
      exit 0
    else
      log "checkpoint saved, but 'scontrol requeue $SLURM_JOB_ID' failed: resubmit to continue"
    fi
    ;;
  *) log "shardrl failed with exit status $status" ;;
esac
exit "$status"
