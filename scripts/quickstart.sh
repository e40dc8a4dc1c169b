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
status=0
mpirun -np 2 "${SHARDRL_MPIRUN_FLAGS[@]}" build/cpu-release/src/app/shardrl \
  train --config configs/quickstart.toml --no-resume --overwrite "$@" || status=$?

# The run directory: configs/quickstart.toml's, unless --set moved it.
run_dir=runs name=quickstart
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; ++i)); do
  if [[ ${args[i]} == --set ]]; then
    value=${args[i + 1]#*=}
    value=${value//\"/}
    case ${args[i + 1]} in
      run.dir=*) run_dir=$value ;;
      run.name=*) name=$value ;;
    esac
  fi
done
# Drawn after a stop by signal too (the metrics so far); a job that wrote none has no curves.
if [[ -s $run_dir/$name/metrics.jsonl ]]; then
  scripts/plot_metrics.py "$run_dir/$name" || echo "quickstart: the curves could not be drawn (above)" >&2
fi
exit "$status"
