#!/usr/bin/env bash
# The main job on this machine: set-up, then two ranks of `shardrl train` on the CPU with
# configs/quickstart.toml, from scratch each time (`shardrl train` alone would resume the run from
# its latest checkpoint; --no-resume --overwrite replaces an earlier quickstart run), then the
# run's curves drawn to <run>/metrics.png (its path printed last). Extra arguments go to shardrl
# (e.g. --set run.iterations=5).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh cpu-release
source scripts/mpi_env.sh
# Curves are drawn only from a metrics.jsonl this job wrote (not an earlier run's, after a job
# that failed at its start).
started=$(mktemp "${TMPDIR:-/tmp}/shardrl_quickstart.XXXXXX")
trap 'rm -f "$started"' EXIT
status=0
mpirun -np 2 "${SHARDRL_MPIRUN_FLAGS[@]}" build/cpu-release/src/app/shardrl \
  train --config configs/quickstart.toml --no-resume --overwrite "$@" || status=$?

# The run directory: configs/quickstart.toml's, unless --set moved it. `train` takes no positional
# arguments, so a KEY=VALUE argument is a --set value in every form: `--set K=V`, `--set=K=V`,
# `--set K1=V1 K2=V2`.
run_dir=runs name=quickstart
for a in "$@"; do
  a=${a#--set=}
  value=${a#*=}
  value=${value//\"/}
  value=${value//\'/}
  case $a in
    run.dir=*) run_dir=$value ;;
    run.name=*) name=$value ;;
  esac
done
# Drawn after a stop by signal too (the metrics so far); a job that wrote none has no curves.
if [[ -s $run_dir/$name/metrics.jsonl && $run_dir/$name/metrics.jsonl -nt $started ]]; then
  scripts/plot_metrics.py "$run_dir/$name" || echo "quickstart: the curves could not be drawn (above)" >&2
fi
exit "$status"
