#!/usr/bin/env bash
# One `shardrl train` job step inside a Slurm batch job, made to outlive the job's time limit.
# The batch scripts (train.sbatch, cpu.sbatch) exec this, so it is the batch shell that Slurm's
# warning signal (#SBATCH --signal=B:USR1@<seconds>) reaches. It forwards the signal to every rank;
# the ranks finish the current iteration, save a checkpoint and exit with 3; then this script
# requeues the job. The requeued job runs this script again, and `shardrl train` resumes from the
# run's latest checkpoint on its own, on however many ranks the job now has (a requeued job may
# start again on fewer or more nodes: see "How many ranks" below).
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

# The warning (USR1) means: save and come back; Slurm sends it to this shell only (B:), so it is
# forwarded to the step (srun and Open MPI's mpirun both pass SIGUSR1 on to every rank). Trapped
# first thing: bash's default for USR1 ends the shell, and a warning that came during the checks
# below (a job whose time limit is shorter than the warning's lead) would end the job unsaved.
warned=0
too_early=0
step=
on_usr1() {
  warned=1
  log "got SIGUSR1 (time limit near): asking the ranks to save a checkpoint and stop"
  [[ -n $step ]] && kill -s USR1 "$step" 2>/dev/null
}
trap on_usr1 USR1

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
# Checked now: read only when a stop comes, after the checkpoint (a bad value then broke the cap).
max_requeues=${SHARDRL_MAX_REQUEUES:-100}
if [[ ! $max_requeues =~ ^[0-9]+$ ]]; then
  echo "run_shardrl.sh: SHARDRL_MAX_REQUEUES must be a whole number, not '$max_requeues'" >&2
  exit 2
fi
bin=${SHARDRL_BIN:-$(command -v shardrl || true)}
if [[ -z $bin || ! -x $bin ]]; then
  echo "run_shardrl.sh: no shardrl binary: set SHARDRL_BIN (got '${SHARDRL_BIN:-}') or put shardrl on PATH" >&2
  exit 2
fi

# How many ranks: the job's CURRENT allocation's tasks. A requeued job may start again on another
# number of nodes (`scontrol update JobId=... NumNodes=... NumTasks=...` while it waits: see
# slurm/README.md), and Slurm (seen with 22.05) then gives the batch shell the current
# SLURM_JOB_NUM_NODES, SLURM_NNODES, SLURM_JOB_NODELIST, SLURM_JOB_CPUS_PER_NODE and
# SLURM_TASKS_PER_NODE, but SLURM_NTASKS and SLURM_NPROCS as sbatch recorded them at submission:
# a plain `srun` asks for the first run's task count ("More processors requested than permitted"
# on fewer nodes; on more nodes it quietly runs the old count). So the count is taken from
# SLURM_TASKS_PER_NODE, Slurm's layout of the job's tasks on its current nodes (e.g. "2(x3),1";
# Open MPI's mpirun reads it too), at most SLURM_NTASKS_PER_NODE on each node when the job asked
# for that (a NumNodes update that leaves NumTasks alone would pack the old count on fewer nodes),
# and given to the launcher explicitly; SLURM_NTASKS and SLURM_NPROCS are corrected for the ranks.
layout_tasks() {   # "2(x3),1" -> 7; fails on anything else
  local part total=0
  local -a parts
  IFS=, read -ra parts <<<"$1"
  ((${#parts[@]} > 0)) || return 1
  for part in "${parts[@]}"; do
    [[ $part =~ ^([0-9]+)(\(x([0-9]+)\))?$ ]] || return 1
    total=$((total + BASH_REMATCH[1] * ${BASH_REMATCH[3]:-1}))
  done
  echo "$total"
}
nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
ntasks=$(layout_tasks "${SLURM_TASKS_PER_NODE:-}") || ntasks=${SLURM_NTASKS:-$nodes}
if [[ ${SLURM_NTASKS_PER_NODE:-} =~ ^[1-9][0-9]*$ ]] && ((ntasks > nodes * SLURM_NTASKS_PER_NODE)); then
  ntasks=$((nodes * SLURM_NTASKS_PER_NODE))
fi
if [[ -n ${SLURM_NTASKS:-} && $SLURM_NTASKS != "$ntasks" ]]; then
  log "the allocation now has $ntasks task(s) on $nodes node(s) (SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-});" \
    "SLURM_NTASKS=$SLURM_NTASKS is from the job's submission"
fi
export SLURM_NTASKS=$ntasks SLURM_NPROCS=$ntasks

case ${SHARDRL_LAUNCHER:-srun} in
  # --kill-on-bad-exit: a rank that dies takes the step down instead of leaving the others
  # waiting in a collective. Ranks that stop on a signal return only after the checkpoint is
  # committed on every rank, so this never cuts a save short.
  # srun does not take sbatch's --cpus-per-task from the job (Slurm 22.05 on): without it each rank
  # would get one core, which its background threads (checkpoint.async's writer) share.
  srun) launcher=(srun --mpi=pmix --kill-on-bad-exit=1 --nodes="$nodes" --ntasks="$ntasks"
                  ${SLURM_CPUS_PER_TASK:+--cpus-per-task=$SLURM_CPUS_PER_TASK}) ;;
  # Open MPI's mpirun reads the allocation itself (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE: one
  # slot per task, current after a requeue too) and forwards SIGUSR1 where it is built to (Debian's
  # 4.1.4 does; slurm/README.md); -np keeps it to the count above.
  mpirun) launcher=(mpirun -np "$ntasks") ;;
  *) echo "run_shardrl.sh: SHARDRL_LAUNCHER must be srun or mpirun, not '$SHARDRL_LAUNCHER'" >&2; exit 2 ;;
esac

restarts=${SLURM_RESTART_COUNT:-0}
# A requeued run continues the run from its latest checkpoint: --requeued tells shardrl so, which
# then ignores the first run's start options (--resume-from would send it back to where the first
# run began, --no-resume --overwrite would delete what it saved since) where the run has saved a
# checkpoint, and applies them where it has not (the first run's node failed before its first save).
args=("$@")
((restarts > 0)) && args+=(--requeued)
log "run $((restarts + 1)) of the job on $nodes node(s), $ntasks task(s): ${launcher[*]} $bin train --config $config ${args[*]}"

# TERM (scancel, the hard time limit, preemption) reaches every process of the job from Slurm
# directly and means: save and stop. Trapping it keeps this shell alive until the ranks have saved
# (before the step starts, it ends this shell: nothing to save).
trap 'log "got SIGTERM: the ranks got it too; waiting for them to save and stop"' TERM

# A warning before the step started (or before its ranks could handle it) means the job's time
# limit is shorter than the warning's lead and the start-up: every requeued run would get it as
# early, so the job stops, saying so, instead of requeuing itself to the limit without progress.
too_short="the job's time limit (sbatch --time) is shorter than the warning's lead (--signal=B:USR1@N) and the start-up: raise --time"
if [[ $warned -eq 1 ]]; then
  log "the time-limit warning came before the step started: not started, not requeued; $too_short"
  status=2
  too_early=1
else
  "${launcher[@]}" "$bin" train --config "$config" ${args[@]+"${args[@]}"} &
  step=$!
  [[ $warned -eq 1 ]] && kill -s USR1 "$step" 2>/dev/null   # a warning that came before $! was known
  # `wait` returns early (status > 128) when a trapped signal arrives; keep waiting for the step.
  # The step may end while the trap runs, after that early return: bash keeps its status, which
  # `wait` then gives (127 once it has been given, when the first `wait` was the step's own end).
  while true; do
    wait "$step"
    status=$?
    if ! kill -0 "$step" 2>/dev/null; then
      wait "$step" 2>/dev/null
      again=$?
      ((again != 127)) && status=$again
      break
    fi
  done
  # Ended by the warning itself (138 = 128 + SIGUSR1): it came before the launcher or the ranks
  # had their handlers, so before any work.
  if [[ $warned -eq 1 && $status -eq 138 ]]; then
    log "the step ended on the time-limit warning before it could handle it: not requeued; $too_short"
    status=2
    too_early=1
  fi
fi

case $status in
  0) log "finished" ;;
  3)
    if [[ $warned -eq 0 ]]; then
      # A preemption with PreemptMode=REQUEUE is requeued by Slurm itself; scancel and the hard
      # limit are not.
      log "stopped by SIGTERM after saving a checkpoint: not requeued by this script (a preemption that Slurm requeues resumes from it; else resubmit to continue)"
    elif ((restarts >= 10#$max_requeues)); then
      log "stopped after saving a checkpoint; not requeued: the job has been requeued $restarts times (SHARDRL_MAX_REQUEUES)"
    elif scontrol requeue "$SLURM_JOB_ID"; then
      log "checkpoint saved; requeued: the next run resumes from it"
      exit 0
    else
      log "checkpoint saved, but 'scontrol requeue $SLURM_JOB_ID' failed: resubmit to continue"
    fi
    ;;
  *) ((too_early)) || log "shardrl failed with exit status $status" ;;
esac
exit "$status"
