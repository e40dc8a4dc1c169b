#!/usr/bin/env bash
# The whole test suite: set-up, then every test through ctest. Non-zero exit on any failure.
#   scripts/test.sh [preset] [ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=cpu-release
if [[ $# -gt 0 && $1 != -* ]]; then preset=$1; shift; fi
scripts/setup.sh "$preset"
source scripts/mpi_env.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --preset "$preset" -j "$jobs" "$@"
