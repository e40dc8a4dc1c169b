#!/usr/bin/env bash
# A shardrl job under a real (private, local) Slurm survives its time limit: it gets the warning
# signal mid-run, checkpoints, requeues itself, resumes from that checkpoint and ends with the
# same parameters, optimizer moments, reference policy and metrics as an uninterrupted job.
#   test_slurm_requeue.sh SHARDRL_BIN REPO_ROOT [srun|mpirun]    (the job step's launcher)
# Exit 77 (ctest: skipped, with the reason printed) where no local Slurm can run.
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
launcher=${3:-srun}
work=$(mktemp -d /tmp/shardrl_slurm.XXXXXX)
chmod 0755 "$work"   # munged runs as user munge and must reach its socket below
iterations=30   # the warning lands after signal_after, well before the end
signal_after=10   # iterations in metrics.jsonl before the warning is sent

source "$root/tests/slurm/local_slurm.sh"
source "$root/scripts/mpi_env.sh"   # how Open MPI runs on this machine; sbatch passes it on
trap 'local_slurm_test_cleanup "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

reason=$(local_slurm_skip_reason)
if [[ -n $reason ]]; then echo "SKIPPED: no local Slurm can run here: $reason"; exit 77; fi
local_slurm_start "$work/slurm" || fail "could not start a local Slurm (logs in $work/slurm)"

# The quickstart task, shortened; periodic checkpoints off, so the only checkpoint before the end
# is the one the warning causes; a KL reference, so that it too must survive the requeue.
submit() {   # submit NAME [more shardrl arguments] -> job id
  local name=$1
  shift
  sbatch --parsable --chdir="$work" --output="$work/$name-%j.out" --job-name="$name" \
    --export=ALL,SHARDRL_HOME="$root",SHARDRL_BIN="$bin",SHARDRL_LAUNCHER="$launcher" \
    "$root/slurm/cpu.sbatch" "$root/configs/quickstart.toml" \
    --set run.dir="$work/runs" --set run.name="$name" --set run.iterations=$iterations \
    --set rl.sft_steps=30 --set rl.kl_coef=0.01 --set checkpoint.interval=0 "$@"
}

# 0. Bad input ends the job at once, with shardrl's exit status and message, and no requeue.
bad=$(submit bad --set rl.samples_per_prompt=0)
local_slurm_wait_gone "$bad" 120
state="$(local_slurm_job_field "$bad" JobState) $(local_slurm_job_field "$bad" ExitCode)"
[[ $state == "FAILED 2:0" ]] || fail "bad config: job state and exit $state, expected FAILED 2:0"
[[ $(local_slurm_job_field "$bad" Restarts) == 0 ]] || fail "bad config: the job was requeued"
grep -q "rl.samples_per_prompt" "$work/bad-$bad.out" || fail "bad config: no message names the key: $(cat "$work/bad-$bad.out")"

# 1. The interrupted job: the warning, as Slurm sends it with --signal=B:USR1 (to the batch shell
#    only), once the RL loop is under way.
wait_iterations() {   # wait_iterations JOBID NAME: until the run has signal_after metrics records
  local metrics=$work/runs/$2/metrics.jsonl i
  for ((i = 0; i < 600; ++i)); do
    [[ -f $metrics && $(wc -l <"$metrics") -ge $signal_after ]] && return 0
    [[ $(local_slurm_job_field "$1" JobState) =~ ^(FAILED|COMPLETED|CANCELLED|TIMEOUT)$ ]] &&
      fail "job $1 ended before the signal: $(cat "$work"/"$2"-*.out)"
    sleep 0.2
  done
  fail "no progress in 120 s: $(cat "$work"/"$2"-*.out)"
}
# Submitted with --no-resume --overwrite (as scripts/quickstart.sh runs): the requeued run (passed
# --requeued) must continue, not delete what the first run saved and start over.
jid=$(submit interrupted --no-resume --overwrite)
wait_iterations "$jid" interrupted
scancel --batch --signal=USR1 "$jid"
local_slurm_wait_gone "$jid" 300
log=$(cat "$work/interrupted-$jid.out")

# 2. The uninterrupted job, the same otherwise.
ref=$(submit uninterrupted)
local_slurm_wait_gone "$ref" 300
ref_log=$(cat "$work/uninterrupted-$ref.out")
grep -q "run_shardrl: .* finished" <<<"$ref_log" || fail "the uninterrupted job did not finish: $ref_log"

# The interrupted job checkpointed on the warning, was requeued once, resumed from exactly that
# checkpoint and finished.
saved=$(sed -n 's/.*checkpoint \(.*\.h5\) (stop requested by a signal).*/\1/p' <<<"$log")
resumed=$(sed -n 's/.*resumed from \(.*\.h5\): .*/\1/p' <<<"$log")
[[ -n $saved ]] || fail "no checkpoint on the warning: $log"
grep -q "checkpoint saved; requeued" <<<"$log" || fail "not requeued: $log"
restarts=$(local_slurm_job_field "$jid" Restarts)
[[ $restarts == 1 ]] || fail "Restarts=$restarts, expected 1"
state=$(local_slurm_job_field "$jid" JobState)
[[ $state == COMPLETED ]] || fail "job state $state"
[[ $resumed == "$saved" ]] || fail "resumed from '$resumed', but the warning saved '$saved'"
stopped_at=$(sed -n 's/.*iter_0*\([0-9]*\)\.h5/\1/p' <<<"$saved")
((stopped_at >= signal_after && stopped_at < iterations)) || fail "stopped at iteration $stopped_at"
grep -q "run_shardrl: .* finished" <<<"$log" || fail "the requeued job did not finish: $log"
grep -q "train --config .* --no-resume --overwrite --requeued" <<<"$log" || fail "the requeued run was not passed --requeued: $log"
grep -q -- "--requeued: continuing .* from its latest checkpoint" <<<"$log" || fail "the requeued run applied --no-resume --overwrite again: $log"
echo "$launcher: warned after $signal_after iterations, saved at $stopped_at, requeued, resumed, finished"

# Same final parameters, optimizer moments and reference policy, to the bit.
final=$(printf 'iter_%08d.h5' $iterations)
a=$work/runs/interrupted/checkpoints/$final
b=$work/runs/uninterrupted/checkpoints/$final
[[ -f $a && -f $b ]] || fail "missing final checkpoint ($a, $b)"
for group in /model /optim /reference; do
  h5diff -r "$a" "$b" "$group" "$group" >/dev/null ||
    fail "$group differs from the uninterrupted run's: $(h5diff -r "$a" "$b" "$group" "$group" | head -20)"
done
# Every iteration is in metrics.jsonl once, with the uninterrupted run's values.
python3 - "$work/runs/interrupted/metrics.jsonl" "$work/runs/uninterrupted/metrics.jsonl" $iterations <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
n = int(sys.argv[3])
assert [r["iteration"] for r in a] == list(range(n)), [r["iteration"] for r in a]
timing = {"rollout_tokens_per_s", "train_tokens_per_s", "rollout_s", "train_s", "mem_peak_bytes", "time"}
for ra, rb in zip(a, b):
    for k in ra.keys() - timing:
        assert ra[k] == rb[k], f"iteration {ra['iteration']}: {k} {ra[k]} != {rb[k]}"
PY
echo "final /model, /optim, /reference and all $iterations metrics records equal the uninterrupted run's"
# 3. scancel (SIGTERM to every process of the job, as at the hard time limit): with srun the
#    ranks save and stop, the job is not requeued, and submitting it again continues from that
#    checkpoint to the same end. (Open MPI's mpirun ends its ranks on SIGTERM without a save:
#    slurm/README.md says so; that launcher is not tested here.)
if [[ $launcher == srun ]]; then
  cid=$(submit cancelled)
  wait_iterations "$cid" cancelled
  scancel "$cid"
  local_slurm_wait_gone "$cid" 120
  clog=$(cat "$work/cancelled-$cid.out")
  state="$(local_slurm_job_field "$cid" JobState) $(local_slurm_job_field "$cid" Restarts)"
  [[ $state == "CANCELLED 0" ]] || fail "scancel: job state and restarts $state, expected CANCELLED 0: $clog"
  csaved=$(sed -n 's/.*checkpoint \(.*\.h5\) (stop requested by a signal).*/\1/p' <<<"$clog")
  [[ -n $csaved ]] || fail "scancel: no checkpoint saved: $clog"
  grep -q "not requeued" <<<"$clog" || fail "scancel: the script did not say it leaves the job alone: $clog"
  cid2=$(submit cancelled)
  local_slurm_wait_gone "$cid2" 300
  clog2=$(cat "$work/cancelled-$cid2.out")
  grep -q "resumed from $csaved" <<<"$clog2" || fail "resubmitted: did not resume from $csaved: $clog2"
  c=$work/runs/cancelled/checkpoints/$final
  for group in /model /optim /reference; do
    h5diff -r "$c" "$b" "$group" "$group" >/dev/null || fail "after scancel and resubmission: $group differs"
  done
  echo "scancel: saved $(basename "$csaved"), not requeued; resubmitted, resumed, ended equal to the uninterrupted run"
fi
