#!/usr/bin/env bash
# A shardrl job across two Slurm nodes (a private local Slurm whose two slurmd, n1 and n2, share
# this machine), launched by slurm/cpu.sbatch through `srun --mpi=pmix`, one rank per node, and
# requeued onto fewer and onto more nodes:
#   1. `sbatch -N 2`: the layout names both nodes, one rank on each, local rank 0 of 1 on each; the
#      time-limit warning reaches the rank on the other node too and both save one checkpoint; the
#      job requeues itself, and while it waits (held) `scontrol update` gives it one node: the
#      requeued run of the same job launches 1 rank on 1 node, resumes from the two-node
#      checkpoint (2 ranks -> 1) and finishes;
#   2. `sbatch -N 1` of the same run with more iterations resumes from that one-rank checkpoint, is
#      warned, saves, requeues, gets two nodes while held, and its requeued run launches 2 ranks,
#      one on n1 and one on n2, resumes (1 rank -> 2) and finishes.
# Every checkpoint passes `shardrl inspect --verify`; metrics.jsonl holds each iteration once.
# (Slurm gives a requeued job its new nodes but the first run's SLURM_NTASKS: slurm/run_shardrl.sh
# must launch the current allocation's task count.)
#   test_slurm_multinode.sh SHARDRL_BIN REPO_ROOT
# Exit 77 (ctest: skipped, with the reason printed) where no local Slurm can run.
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
work=$(mktemp -d /tmp/shardrl_slurm_multinode.XXXXXX)
chmod 0755 "$work"   # munged runs as user munge and must reach its socket below
first_iterations=20  # the run's length in job 1 (2 nodes, requeued onto 1)
iterations=32        # and in job 2 (1 node, requeued onto 2)
signal_after=5       # iterations a job does before its warning

source "$root/tests/slurm/local_slurm.sh"
source "$root/scripts/mpi_env.sh"   # how Open MPI runs on this machine; sbatch passes it on
# Open MPI learns from PMIx which ranks share a node: ranks of different slurmd are remote to it,
# so they need a network transport besides shared memory; every slurmd here is on 127.0.0.1.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo
trap 'local_slurm_test_cleanup "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }

reason=$(local_slurm_skip_reason)
[[ -z $reason ]] || skip "no local Slurm can run here: $reason"
command -v srun >/dev/null || skip "no local Slurm can run here: srun not found (package slurm-client)"
local_slurm_start "$work/slurm" 2 || fail "could not start a local Slurm of two nodes (logs in $work/slurm)"
srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no PMIx plugin: $(srun --mpi=list 2>&1 | tr '\n' ' ')"
start=$SECONDS

submit() {   # submit NAME NODES ITERATIONS [more shardrl arguments] -> job id
  local name=$1 nodes=$2 iters=$3
  shift 3
  sbatch --parsable --chdir="$work" --output="$work/$name-%j.out" --job-name="$name" \
    --nodes="$nodes" --ntasks-per-node=1 \
    --export=ALL,SHARDRL_HOME="$root",SHARDRL_BIN="$bin",SHARDRL_LAUNCHER=srun \
    "$root/slurm/cpu.sbatch" "$root/configs/quickstart.toml" \
    --set run.dir="$work/runs" --set run.name=multinode --set run.iterations="$iters" \
    --set rl.sft_steps=20 --set checkpoint.interval=10 --set checkpoint.keep_last=100 "$@"
}
verify() {   # verify CHECKPOINT RANKS: complete, every checksum right, written by RANKS ranks
  local out
  out=$("$bin" inspect "$1" --verify 2>&1) || fail "inspect --verify $1: $out"
  grep -q "^checksums: all [0-9]* tensors verified" <<<"$out" || fail "inspect --verify $1 verified nothing: $out"
  grep -q "written by shardrl .* on $2 ranks" <<<"$out" || fail "$1 not written on $2 ranks: $(head -3 <<<"$out")"
}
field() { local_slurm_job_field "$@"; }
metrics=$work/runs/multinode/metrics.jsonl
checkpoints=$work/runs/multinode/checkpoints
wait_records() {   # wait_records JOBID NAME COUNT: until metrics.jsonl has COUNT records
  local i
  for ((i = 0; i < 600; ++i)); do
    [[ -f $metrics && $(wc -l <"$metrics") -ge $3 ]] && return 0
    [[ $(field "$1" JobState) =~ ^(FAILED|COMPLETED|CANCELLED|TIMEOUT)$ ]] &&
      fail "$2: job $1 ended before the warning: $(cat "$work/$2-$1.out")"
    sleep 0.2
  done
  fail "$2: no progress in 120 s: $(cat "$work/$2-$1.out")"
}
# requeue_onto JOBID NAME NODES: the warning (as --signal=B:USR1 sends it, to the batch shell) to
# the running job, which saves and requeues itself; held meanwhile (a hold set while the job runs
# outlasts the requeue), it is given NODES nodes of one task and CPU each, and released.
requeue_onto() {
  local i
  scontrol hold "$1" || fail "$2: could not hold the running job $1"
  scancel --batch --signal=USR1 "$1"
  for ((i = 0; i < 600; ++i)); do
    [[ $(field "$1" Restarts) == 1 && $(field "$1" JobState) == PENDING ]] && break
    [[ $(field "$1" JobState) =~ ^(FAILED|COMPLETED|CANCELLED|TIMEOUT)$ ]] &&
      fail "$2: job $1 ended instead of requeueing: $(cat "$work/$2-$1.out")"
    sleep 0.2
  done
  ((i < 600)) || fail "$2: job $1 not requeued within 120 s: $(cat "$work/$2-$1.out")"
  # NumNodes=N-N: a plain N above the job's maximum (--nodes=1 is 1-1) is refused as invalid
  scontrol update JobId="$1" NumNodes="$3-$3" NumTasks="$3" NumCPUs="$3" ||
    fail "$2: scontrol update JobId=$1 NumNodes=$3-$3 NumTasks=$3 NumCPUs=$3 failed"
  scontrol release "$1" || fail "$2: could not release job $1"
}
check_ended() {   # check_ended JOBID NAME LOG NODELIST: completed, exit 0, once requeued, on NODELIST
  local state
  state="$(field "$1" JobState) $(field "$1" ExitCode) $(field "$1" Restarts)"
  [[ $state == "COMPLETED 0:0 1" ]] || fail "$2: job state, exit, restarts $state, expected COMPLETED 0:0 1: $3"
  [[ $(field "$1" NodeList) =~ ^($4)$ ]] || fail "$2: the requeued run ran on '$(field "$1" NodeList)'"
}
count() { grep -c -- "$1" <<<"$2" || true; }
# check_runs NAME LOG: run 1 and run 2 of the job: each one's nodes, tasks, ranks and layout, once
check_runs() {
  local run n ranks
  for run in 1 2; do
    n=${nodes_of_run[$run]}
    grep -q "run_shardrl: .* run $run of the job on $n node(s), $n task(s): srun .* --nodes=$n --ntasks=$n " <<<"$2" ||
      fail "$1: run $run is not $n task(s) on $n node(s): $2"
  done
  for ranks in 1 2; do
    [[ $(count "shardrl .* | $ranks ranks on $ranks node(s) |" "$2") == 1 ]] ||
      fail "$1: shardrl did not count $ranks ranks on $ranks node(s) once: $2"
  done
  [[ $(count "rank 0/2  host n1  node 0/2  local rank 0/1 " "$2") == 1 ]] ||
    fail "$1: rank 0 of 2 is not alone on n1: $(grep -A2 'devices:' <<<"$2")"
  [[ $(count "rank 1/2  host n2  node 1/2  local rank 0/1 " "$2") == 1 ]] ||
    fail "$1: rank 1 of 2 is not alone on n2: $(grep -A2 'devices:' <<<"$2")"
  [[ $(grep -Ec "rank 0/1  host n[12]  node 0/1  local rank 0/1 " <<<"$2") == 1 ]] ||
    fail "$1: the one-rank run is not rank 0 alone on n1 or n2: $(grep -A1 'devices:' <<<"$2")"
}
# check_requeue NAME LOG WARNED_AT FROM_RANKS END TO_RANKS: saved on the warning (sent once the run
# had WARNED_AT iterations) by FROM_RANKS ranks, requeued; the requeued run resumed from exactly
# that checkpoint and finished at END, saved by TO_RANKS ranks
check_requeue() {
  local saved resumed stopped_at
  saved=$(sed -n 's/.*checkpoint \(.*\.h5\) (stop requested by a signal).*/\1/p' <<<"$2")
  [[ -n $saved ]] || fail "$1: no checkpoint on the warning: $2"
  grep -q "checkpoint saved; requeued" <<<"$2" || fail "$1: not requeued: $2"
  resumed=$(sed -n 's/.*resumed from \(.*\.h5\): .*/\1/p' <<<"$2" | tail -1)
  [[ $resumed == "$saved" ]] || fail "$1: the requeued run resumed from '$resumed', but the warning saved '$saved'"
  stopped_at=$(sed -n 's/.*iter_0*\([0-9]*\)\.h5/\1/p' <<<"$saved")
  ((stopped_at >= $3 && stopped_at < $5)) || fail "$1: stopped at iteration $stopped_at, not in [$3, $5)"
  [[ $(count "run_shardrl: .* finished" "$2") == 1 ]] || fail "$1: the requeued run did not finish: $2"
  verify "$saved" "$4"
  verify "$checkpoints/$(printf 'iter_%08d.h5' "$5")" "$6"
  echo "$1: $4 rank(s) saved $(basename "$saved") on the warning; requeued onto $6 node(s), resumed, finished at $5"
}

# 1. Two nodes, warned once the RL loop runs; requeued onto one node.
jid=$(submit shrink 2 $first_iterations)
wait_records "$jid" shrink $signal_after
requeue_onto "$jid" shrink 1
local_slurm_wait_gone "$jid" 300
log=$(cat "$work/shrink-$jid.out")
check_ended "$jid" shrink "$log" 'n1|n2'
nodes_of_run=([1]=2 [2]=1)
check_runs shrink "$log"
check_requeue shrink "$log" $signal_after 2 $first_iterations 1

# 2. The same run on one node, with more iterations; warned, requeued onto two nodes.
jid=$(submit grow 1 $iterations)
wait_records "$jid" grow $((first_iterations + signal_after))
requeue_onto "$jid" grow 2
local_slurm_wait_gone "$jid" 300
log=$(cat "$work/grow-$jid.out")
check_ended "$jid" grow "$log" 'n\[1-2\]'
first_final=$checkpoints/$(printf 'iter_%08d.h5' $first_iterations)
grep -q "resumed from $first_final: $first_iterations iterations" <<<"$log" ||
  fail "grow: run 1 did not resume from $first_final: $log"
nodes_of_run=([1]=1 [2]=2)
check_runs grow "$log"
check_requeue grow "$log" $((first_iterations + signal_after)) 1 $iterations 2

# Every iteration of the run is in metrics.jsonl once, in order, across the four runs.
python3 - "$metrics" $iterations <<'PY' || fail "metrics.jsonl is not one record per iteration"
import json, sys
got = [json.loads(l)["iteration"] for l in open(sys.argv[1])]
assert got == list(range(int(sys.argv[2]))), got
PY
echo "2 nodes -> 1 -> 2 by requeue: layouts on n1/n2 and one node right, every checkpoint verified," \
  "every iteration once; $((SECONDS - start)) s of jobs"
