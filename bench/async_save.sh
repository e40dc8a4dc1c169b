#!/usr/bin/env bash
# The training time a checkpoint save costs, synchronous against checkpoint.async, in one command
# on one machine (issue 28's bench): the same RL job (MODEL, one rank) run three times,
#   none  - ITERS iterations, no periodic save;
#   sync  - a synchronous save after iteration AT;
#   async - a background save after iteration AT;
# the time lost to a save is the seconds from iteration AT's progress line to iteration ITERS's,
# against the run without a save (the jobs draw the same rollouts: random weights, fixed seed). A
# synchronous save's seconds are its log line's. Set ITERS so that the background write ends
# before the last iteration (the async run says when it ended).
#   bench/async_save.sh        (environment: MODEL=llama-1b ITERS=45 AT=24 BIND="--bind-to none"
#                               BUILD=build/cuda-release DIR=/tmp/async_save_bench; extra
#                               `--set key=value` arguments go to every run)
set -uo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-llama-1b}
iters=${ITERS:-45}
at=${AT:-24}
bind=${BIND:---bind-to none}
build=${BUILD:-build/cuda-release}
dir=${DIR:-/tmp/async_save_bench}
bin="$build/src/app/shardrl"
[[ -x $bin ]] || { echo "async_save: $bin not built (cmake --build $build --target shardrl)" >&2; exit 2; }
job=("$bin" train --config configs/quickstart.toml --no-resume --set model.preset="$model" --set rl.task=add
  --set rl.prompts_per_iteration=32 --set rl.samples_per_prompt=8 --set rl.minibatches=2
  --set rollout.max_new_tokens=64 --set train.seq_len=256 --set train.micro_batch_size=16 --set rl.sft_steps=0
  --set rl.kl_coef=0 --set checkpoint.keep_last=1 --set run.dir="$dir" --set run.iterations="$iters" "$@")
mkdir -p "$dir"

# seconds of the day of a log line's [hh:mm:ss.mmm] stamp
stamp() { sed -n 's/^\[\([0-9]*\):\([0-9]*\):\([0-9.]*\)\].*/\1 \2 \3/p' | awk '{print $1 * 3600 + $2 * 60 + $3}'; }
span() {   # span LOG: seconds from iteration AT's line to iteration ITERS's
  local a b
  a=$(grep -m1 " iter $at/$iters " "$1" | stamp)
  b=$(grep -m1 " iter $iters/$iters " "$1" | stamp)
  awk -v a="$a" -v b="$b" 'BEGIN { d = b - a; if (d < 0) d += 86400; printf "%.2f", d }'
}
run() {   # run NAME [shardrl arguments]
  local name=$1
  shift
  # shellcheck disable=SC2086  # BIND is mpirun words
  mpirun -np 1 $bind "${job[@]}" --set run.name="$name" "$@" > "$dir/$name.log" 2>&1 ||
    { echo "async_save: the $name run failed (log: $dir/$name.log)" >&2; tail -5 "$dir/$name.log" >&2; exit 1; }
  rm -rf "${dir:?}/$name"
}
run none --set checkpoint.interval=0
run sync --set checkpoint.interval="$at"
run async --set checkpoint.interval="$at" --set checkpoint.async=true

none=$(span "$dir/none.log")
async=$(span "$dir/async.log")
sync_s=$(sed -n "s/.*(interval) in \([0-9.]*\)s.*/\1/p" "$dir/sync.log" | head -1)
paused=$(sed -n "s/.*training paused \([0-9.]*\)s.*/\1/p" "$dir/async.log" | head -1)
written=$(sed -n "s/.*(interval) written in the background in \([0-9.]*\)s.*/\1/p" "$dir/async.log" | head -1)
lost=$(awk -v a="$async" -v n="$none" 'BEGIN { printf "%.2f", a - n }')
echo "| save | iterations $((at + 1))-$iters | time lost | of a synchronous save | pause | background write |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "| none | ${none} s | | | | |"
echo "| synchronous | | ${sync_s} s | 100% | ${sync_s} s | |"
echo "| background | ${async} s | ${lost} s | $(awk -v l="$lost" -v s="$sync_s" 'BEGIN { printf "%.1f%%", 100 * l / s }') | ${paused} s | ${written} s |"
ended=$(grep -m1 "written in the background" "$dir/async.log" | stamp)
last=$(grep -m1 " iter $iters/$iters " "$dir/async.log" | stamp)
awk -v e="$ended" -v l="$last" 'BEGIN { exit !(e > l) }' &&
  echo "(the background write outlasted the iterations: the time lost is a lower bound; raise ITERS)"
