#!/usr/bin/env bash
# scripts/plot_metrics.py on small synthetic metrics.jsonl files: the PNG exists and is a PNG, --out
# is honoured, a missing metrics file exits 2 with a message on stderr; what is drawn (--print-layout):
# a metric that is zero throughout is left out, two metrics that coincide get distinct styles, long
# runs are smoothed, the warm-up is read from config.toml; and `python3 scripts/plot_metrics.py`
# works when the python3 first on PATH has no matplotlib (a shim without site-packages).
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
# What is drawn. kl is zero throughout (rl.kl_coef = 0) and pass_rate equals reward_mean (a 0/1
# reward): kl is left out and its panel keeps only loss; the two rewards differ in line style.
layout() { "$py" "$script" "$1" --print-layout; }
check() {   # check RUN PYTHON-EXPRESSION-ON-l (the layout as a dict)
  layout "$1" | "$py" -c "import json, sys; l = json.load(sys.stdin); sys.exit(0 if ($2) else 1)" ||
    { echo "layout of $1 fails: $2" >&2; layout "$1" >&2; exit 1; }
}
flat="$tmp/flat"
mkdir "$flat"
"$py" - "$flat" <<'PY'
import json, sys
with open(sys.argv[1] + "/metrics.jsonl", "w") as f:
    for i in range(40):
        r = 1.0 if i % 3 else 0.0
        f.write(json.dumps({"iteration": i, "reward_mean": r, "pass_rate": r, "loss": 1.0 / (i + 1), "kl": 0.0,
                            "rollout_tokens_per_s": 1000 + i}) + "\n")
PY
printf '[rl]\nsft_steps = 150\n' >"$flat/config.toml"
keys='[[s["key"] for s in p["series"]] for p in l["panels"]]'
check "$flat" "$keys == [['reward_mean', 'pass_rate'], ['loss'], ['rollout_tokens_per_s']]"
check "$flat" 'len({(s["linestyle"], s["marker"]) for s in l["panels"][0]["series"]}) == 2'
check "$flat" 'l["window"] == 2 and l["warmup_steps"] == 150'
# Five iterations: drawn as they are; kl nonzero somewhere goes on an axis of its own; no config.toml.
check "$run" 'l["window"] == 1 and l["warmup_steps"] == 0'
check "$run" '[s["right_axis"] for s in l["panels"][1]["series"]] == [False, True]'

# Started by a python3 without matplotlib (first on PATH, as pyenv or a virtualenv would be): the
# script runs itself again with Debian's /usr/bin/python3 and draws.
if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  mkdir "$tmp/bin"
  printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' >"$tmp/bin/python3"
  chmod +x "$tmp/bin/python3"
  if PATH="$tmp/bin:$PATH" python3 -c 'import matplotlib' 2>/dev/null; then
    echo "the shim python3 imports matplotlib: the test would prove nothing" >&2
    exit 1
  fi
  rm -f "$flat/metrics.png"
  out=$(PATH="$tmp/bin:$PATH" python3 "$script" "$flat")
  [[ $out == "$flat/metrics.png" ]] && is_png "$flat/metrics.png" ||
    { echo "python3 without matplotlib first on PATH: no PNG (printed '$out')" >&2; exit 1; }
else
  echo "plot_metrics_test: /usr/bin/python3 has no matplotlib: the interpreter fallback is not checked" >&2
  exit 1
fi
echo "plot_metrics_test: ok"
