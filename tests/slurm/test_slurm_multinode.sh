#!/usr/bin/env bash
# A shardrl job across two Slurm nodes (a private local Slurm whose two slurmd, n1 and n2, share
# this machine), launched by slurm/cpu.sbatch through `srun --mpi=pmix`, one rank per node:
#   - the layout names both nodes, one rank on each, local rank 0 of 1 on each;
#   - the time-limit warning reaches the rank on the other node too: both save one checkpoint,
#     the job requeues itself, the requeued run (again on both nodes) resumes from it;
#   - the same run, submitted again on one node with more iterations, resumes from the two-node
#     checkpoint (2 ranks -> 1) and finishes; every checkpoint passes `shardrl inspect --verify`.
#   test_slurm_multinode.sh SHARDRL_BIN REPO_ROOT
# Exit 77 (ctest: skipped, with the reason printed) where no local Slurm can run.
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
work=$(mktemp -d /tmp/shardrl_slurm_multinode.XXXXXX)
chmod 0755 "$work"   # munged runs as user munge and must reach its socket below
iterations=30        # of the two-node job
signal_after=5       # iterations in metrics.jsonl before the warning is sent
more_iterations=36   # of the one-node job that continues the run

source "$root/tests/slurm/local_slurm.sh"
source "$root/scripts/mpi_env.sh"   # how Open MPI runs on this machine; sbatch passes it on
# Open MPI learns from PMIx which ranks share a node: ranks of different slurmd are remote to it,
# so they need a network transport besides shared memory; every slurmd here is on 127.0.0.1.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo
cleanup() {
  local rc=$?
  local_slurm_stop "$work/slurm"
  if [[ ($rc -eq 0 || $rc -eq 77) && -z ${SHARDRL_KEEP_TEST_DIR:-} ]]; then rm -rf "$work"
  else echo "kept for inspection: $work" >&2; fi
}
trap cleanup EXIT
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
wait_gone() {   # wait_gone JOBID SECONDS
  local i
  for ((i = 0; i < $2 * 5; ++i)); do
    squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
    sleep 0.2
  done
  fail "job $1 still in the queue after $2 s: $(squeue -h -j "$1")"
}
job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
verify() {   # verify CHECKPOINT RANKS: complete, every checksum right, written by RANKS ranks
  local out
  out=$("$bin" inspect "$1" --verify 2>&1) || fail "inspect --verify $1: $out"
  grep -q "^checksums: all [0-9]* tensors verified" <<<"$out" || fail "inspect --verify $1 verified nothing: $out"
  grep -q "written by shardrl .* on $2 ranks" <<<"$out" || fail "$1 not written on $2 ranks: $(head -3 <<<"$out")"
}
checkpoints=$work/runs/multinode/checkpoints

# 1. Two nodes, one rank each; the warning (as --signal=B:USR1 sends it) once the RL loop runs.
jid=$(submit two 2 $iterations)
metrics=$work/runs/multinode/metrics.jsonl
for ((i = 0; i < 600; ++i)); do
  [[ -f $metrics && $(wc -l <"$metrics") -ge $signal_after ]] && break
  [[ $(job_field "$jid" JobState) =~ ^(FAILED|COMPLETED|CANCELLED|TIMEOUT)$ ]] &&
    fail "job $jid ended before the signal: $(cat "$work"/two-*.out)"
  sleep 0.2
done
((i < 600)) || fail "no progress in 120 s: $(cat "$work"/two-*.out)"
scancel --batch --signal=USR1 "$jid"
wait_gone "$jid" 300
log=$(cat "$work/two-$jid.out")
[[ $(job_field "$jid" JobState) == COMPLETED && $(job_field "$jid" ExitCode) == 0:0 ]] ||
  fail "two nodes: job state $(job_field "$jid" JobState), exit $(job_field "$jid" ExitCode): $log"
[[ $(job_field "$jid" NodeList) == "n[1-2]" ]] || fail "two nodes: the job ran on '$(job_field "$jid" NodeList)'"
[[ $(job_field "$jid" Restarts) == 1 ]] || fail "two nodes: Restarts=$(job_field "$jid" Restarts), expected 1: $log"

# Both runs of the job (before and after the requeue) span both nodes, and say so.
[[ $(grep -c "run_shardrl: .* on 2 node(s), 2 task(s)" <<<"$log") == 2 ]] || fail "two nodes: not 2 runs on 2 nodes: $log"
[[ $(grep -c "shardrl .* | 2 ranks on 2 node(s) |" <<<"$log") == 2 ]] || fail "two nodes: shardrl did not count 2 nodes twice: $log"
[[ $(grep -c "rank 0/2  host n1  node 0/2  local rank 0/1 " <<<"$log") == 2 ]] ||
  fail "two nodes: rank 0 is not alone on n1: $(grep -A2 'devices:' <<<"$log")"
[[ $(grep -c "rank 1/2  host n2  node 1/2  local rank 0/1 " <<<"$log") == 2 ]] ||
  fail "two nodes: rank 1 is not alone on n2: $(grep -A2 'devices:' <<<"$log")"

# Both ranks saved on the warning; the requeued run resumed from exactly that checkpoint.
saved=$(sed -n 's/.*checkpoint \(.*\.h5\) (stop requested by a signal).*/\1/p' <<<"$log")
[[ -n $saved ]] || fail "two nodes: no checkpoint on the warning: $log"
grep -q "checkpoint saved; requeued" <<<"$log" || fail "two nodes: not requeued: $log"
resumed=$(sed -n 's/.*resumed from \(.*\.h5\): .*/\1/p' <<<"$log")
[[ $resumed == "$saved" ]] || fail "two nodes: resumed from '$resumed', but the warning saved '$saved'"
stopped_at=$(sed -n 's/.*iter_0*\([0-9]*\)\.h5/\1/p' <<<"$saved")
((stopped_at >= signal_after && stopped_at < iterations)) || fail "two nodes: stopped at iteration $stopped_at"
[[ $(grep -c "run_shardrl: .* finished" <<<"$log") == 1 ]] || fail "two nodes: the requeued run did not finish: $log"
verify "$saved" 2
two_final=$checkpoints/$(printf 'iter_%08d.h5' $iterations)
verify "$two_final" 2
echo "two nodes: rank 0 on n1, rank 1 on n2, each local rank 0/1; warned, both saved $(basename "$saved"), requeued, resumed on 2 nodes, finished at $iterations"

# 2. The run again on one node, with more iterations: it continues from the two-node checkpoint.
one=$(submit one 1 $more_iterations)
wait_gone "$one" 300
olog=$(cat "$work/one-$one.out")
[[ $(job_field "$one" JobState) == COMPLETED && $(job_field "$one" ExitCode) == 0:0 ]] ||
  fail "one node: job state $(job_field "$one" JobState), exit $(job_field "$one" ExitCode): $olog"
node=$(job_field "$one" NodeList)
[[ $node == n1 || $node == n2 ]] || fail "one node: the job ran on '$node'"
grep -q "run_shardrl: .* on 1 node(s), 1 task(s)" <<<"$olog" || fail "one node: not 1 task on 1 node: $olog"
grep -q "rank 0/1  host $node  node 0/1  local rank 0/1 " <<<"$olog" ||
  fail "one node: layout is not rank 0 alone on $node: $(grep -A1 'devices:' <<<"$olog")"
grep -q "resumed from $two_final: $iterations iterations" <<<"$olog" ||
  fail "one node: did not resume from $two_final: $olog"
grep -q "run_shardrl: .* finished" <<<"$olog" || fail "one node: did not finish: $olog"
verify "$checkpoints/$(printf 'iter_%08d.h5' $more_iterations)" 1
# Every iteration of the run is in metrics.jsonl once, in order, across the three runs.
python3 - "$metrics" $more_iterations <<'PY' || fail "metrics.jsonl is not one record per iteration"
import json, sys
got = [json.loads(l)["iteration"] for l in open(sys.argv[1])]
assert got == list(range(int(sys.argv[2]))), got
PY
echo "one node ($node): resumed from the two-node $(basename "$two_final"), finished at $more_iterations;" \
  "every checkpoint verified; $((SECONDS - start)) s of jobs"
