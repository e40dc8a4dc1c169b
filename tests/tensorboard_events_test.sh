#!/usr/bin/env bash
# The TensorBoard event file of a real run (np 2, the quickstart config shortened), read back by
# tests/read_tensorboard_events.py: every record's CRCs, the Event protobufs, the config at step
# 0, one summary per metrics.jsonl record with its values; then the run resumed to more
# iterations: still one file, each step once. A file with one byte flipped must be refused (the
# reader can fail). Skipped (77) where Debian's protobuf or crcmod for python3 are missing.
#   tests/tensorboard_events_test.sh path/to/shardrl path/to/source
set -euo pipefail
shardrl=${1:?usage: tensorboard_events_test.sh path/to/shardrl path/to/source}
src=${2:?usage: tensorboard_events_test.sh path/to/shardrl path/to/source}
py=/usr/bin/python3
[[ -x $py ]] || { echo "tensorboard_events_test: skipped: no /usr/bin/python3" >&2; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardrl_tensorboard.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
run_job() {   # iterations
  mpirun -np 2 --oversubscribe "$shardrl" train --config "$src/configs/quickstart.toml" --set run.name=tb \
    --set run.iterations="$1" --set rl.sft_steps=2 --set rl.prompts_per_iteration=8 > "job_$1.log" 2>&1 ||
    { tail -20 "job_$1.log"; exit 1; }
}
check() { "$py" "$src/tests/read_tensorboard_events.py" runs/tb; }
run_job 3
check
run_job 5
check
[[ $(wc -l < runs/tb/metrics.jsonl) -eq 5 ]] || { echo "metrics.jsonl should hold 5 iterations"; exit 1; }
# One byte of the last record's data flipped: its CRC no longer matches.
f=$(ls runs/tb/tensorboard/*tfevents*)
size=$(stat -c %s "$f")
printf '\xff' | dd of="$f" bs=1 seek=$((size - 6)) conv=notrunc status=none
if check 2>err.txt; then echo "a corrupted event file was accepted"; exit 1; fi
grep -q "CRC does not match" err.txt || { cat err.txt; exit 1; }
echo "tensorboard_events_test: passed"
