#!/usr/bin/env bash
# scripts/plot_metrics.py on a small synthetic metrics.jsonl: the PNG exists and is a PNG, --out is
# honoured, and a missing metrics file exits 2 with a message on stderr.
#   tests/plot_metrics_test.sh path/to/plot_metrics.py
set -euo pipefail
script=${1:?usage: plot_metrics_test.sh path/to/plot_metrics.py}

# The first python3 that has matplotlib (a pyenv or venv python3 on PATH may lack the Debian one).
py=
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import matplotlib' 2>/dev/null; then
    py=$candidate
    break
  fi
done
if [[ -z $py ]]; then
  echo "plot_metrics_test: no python3 with matplotlib (apt-get install python3-matplotlib)" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shardrl_plot_metrics.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
run="$tmp/run"
mkdir "$run"

# Five iterations; kl is null once (a gap) and train_tokens_per_s is absent (skipped).
cat >"$run/metrics.jsonl" <<'JSONL'
{"iteration":0,"reward_mean":0.1,"pass_rate":0.05,"loss":1.5,"kl":0,"rollout_tokens_per_s":1200}
{"iteration":1,"reward_mean":0.2,"pass_rate":0.1,"loss":1.25,"kl":0.001,"rollout_tokens_per_s":1250.5}
{"iteration":2,"reward_mean":0.35,"pass_rate":0.2,"loss":1.0,"kl":null,"rollout_tokens_per_s":1190}
{"iteration":3,"reward_mean":0.5,"pass_rate":0.3,"loss":0.75,"kl":0.004,"rollout_tokens_per_s":1300}
{"iteration":4,"reward_mean":0.6,"pass_rate":0.45,"loss":0.5,"kl":0.005,"rollout_tokens_per_s":1310}
JSONL

is_png() { [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; }

out=$("$py" "$script" "$run")
[[ $out == "$run/metrics.png" ]] || { echo "printed '$out', expected '$run/metrics.png'" >&2; exit 1; }
[[ -s $run/metrics.png ]] || { echo "no $run/metrics.png" >&2; exit 1; }
is_png "$run/metrics.png" || { echo "$run/metrics.png is not a PNG" >&2; exit 1; }

out=$("$py" "$script" "$run" --out "$tmp/other.png")
[[ $out == "$tmp/other.png" ]] || { echo "printed '$out', expected '$tmp/other.png'" >&2; exit 1; }
is_png "$tmp/other.png" || { echo "--out: $tmp/other.png is not a PNG" >&2; exit 1; }

# A missing file and an empty file: exit 2 and say why on stderr.
mkdir "$tmp/empty_run"
for dir in "$tmp/no_such_run" "$tmp/empty_run"; do
  [[ $dir == */empty_run ]] && : >"$dir/metrics.jsonl"
  rc=0
  "$py" "$script" "$dir" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "$dir: exit code $rc, expected 2" >&2
    exit 1
  fi
  grep -q "metrics" "$tmp/stderr" || { echo "$dir: no message on stderr" >&2; exit 1; }
  [[ ! -s $tmp/stdout ]] || { echo "$dir: unexpected stdout" >&2; exit 1; }
done
echo "plot_metrics_test: ok"
