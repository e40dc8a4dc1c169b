#!/usr/bin/env bash
# The main job on this machine: set-up, then two ranks of `shardrl train` on the CPU with
# configs/quickstart.toml, from scratch each time (`shardrl train` alone would resume the run from
# its latest checkpoint; --no-resume --overwrite replaces an earlier quickstart run). Extra
# arguments go to shardrl (e.g. --set run.iterations=5).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh cpu-release
source scripts/mpi_env.sh
exec mpirun -np 2 "${SHARDRL_MPIRUN_FLAGS[@]}" build/cpu-release/src/app/shardrl \
  train --config configs/quickstart.toml --no-resume --overwrite "$@"
