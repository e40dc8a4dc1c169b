#!/usr/bin/env bash
# `shardrl train --trace` on 2 ranks (the quickstart config shortened): one Chrome trace file with
# a named track per rank, each rank's phases present (warm-up, iterations, rollout with its
# prefill and decode steps, train with each unit's forward, backward, all-gather and
# reduce-scatter, the optimizer, the checkpoint save), every nested span inside its parent, and
# scripts/plot_trace.py draws it.
#   tests/trace_file_test.sh path/to/shardrl path/to/source
set -euo pipefail
shardrl=${1:?usage: trace_file_test.sh path/to/shardrl path/to/source}
src=${2:?usage: trace_file_test.sh path/to/shardrl path/to/source}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardrl_trace.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
mpirun -np 2 --oversubscribe "$shardrl" train --config "$src/configs/quickstart.toml" --set run.name=tr \
  --set run.iterations=2 --set rl.sft_steps=1 --set rl.prompts_per_iteration=8 --trace "$tmp/trace.json" \
  > job.log 2>&1 || { tail -20 job.log; exit 1; }
python3 - "$tmp/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(names) == [0, 1] and all(n.startswith(f"rank {p} (") for p, n in names.items()), names
want = ["warm-up step", "iteration", "rollout", "rollout weights", "prefill", "decode step", "train", "log-probs",
        "forward unit", "backward unit", "all-gather unit", "reduce-scatter unit", "optimizer", "checkpoint save"]
for rank in (0, 1):
    mine = [e for e in spans if e["pid"] == rank]
    kinds = {e["name"].rsplit(" ", 1)[0] if e["name"].split()[-1].isdigit() else e["name"] for e in mine}
    missing = [w for w in want if w not in kinds]
    assert not missing, f"rank {rank} lacks {missing}"
    assert sum(e["name"].startswith("iteration ") for e in mine) == 2, "two iterations"
    assert all(e["dur"] >= 0 for e in mine)
    # A span at depth d > 0 lies inside a span at depth d - 1 of its rank.
    for e in mine:
        d = e["args"]["depth"]
        if d == 0:
            continue
        parents = [p for p in mine if p["args"]["depth"] == d - 1 and p["ts"] <= e["ts"] and
                   e["ts"] + e["dur"] <= p["ts"] + p["dur"] + 1e-3]
        assert parents, f"rank {rank}: {e['name']} at depth {d} has no enclosing span"
print(f"trace_file_test: {len(spans)} spans on 2 ranks checked")
PY
out=$(python3 "$src/scripts/plot_trace.py" "$tmp/trace.json" --out "$tmp/trace.png")
[[ $(head -c 8 "$out" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || { echo "no PNG from plot_trace.py"; exit 1; }
# A path that cannot take the trace stops the job at its start, every rank with exit 2, naming it,
# before anything is trained or saved (it was found at the job's end, and a signal's stop then
# exited 2 on rank 0 and 3 on the others).
refused() {   # refused NAME TRACE_PATH MESSAGE
  local start=$SECONDS status
  set +e
  mpirun -np 2 --oversubscribe "$shardrl" train --config "$src/configs/quickstart.toml" --set run.name="$1" \
    --set run.iterations=2 --trace "$2" > "$1.log" 2>&1
  status=$?
  set -e
  [[ $status == 2 ]] || { echo "--trace $2 exited $status, not 2"; tail -5 "$1.log"; exit 1; }
  grep -q -- "--trace $2: $3" "$1.log" || { echo "no message naming $2"; tail -5 "$1.log"; exit 1; }
  [[ ! -e runs/$1/checkpoints ]] || { echo "the job with --trace $2 saved a checkpoint"; exit 1; }
  (( SECONDS - start < 60 )) || { echo "the job with --trace $2 took $((SECONDS - start)) s"; exit 1; }
}
mkdir -p "$tmp/ro" && touch "$tmp/ro/file"
refused bad "$tmp/ro/file/trace.json" "cannot create directory"
# A path naming a directory (a trailing slash) is refused too, and leaves nothing there.
refused slash "$tmp/traces/" "names a directory, not a file"
[[ -z $(ls -A "$tmp/traces" 2>/dev/null) ]] || { echo "files left in traces/: $(ls -A "$tmp/traces")"; exit 1; }
echo "trace_file_test: passed"
