#!/usr/bin/env bash
# Installs what shardrl needs (Debian packages, only the missing ones), configures and builds.
# Idempotent: a second run only rebuilds what changed.
#   scripts/setup.sh [preset]        preset: cpu-release (default), cpu-debug, cuda-release
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-${SHARDRL_PRESET:-cpu-release}}"

packages=(libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools libopenblas-dev
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libtrilinos-kokkos-dev libgtest-dev cmake g++ make
  libpcre2-dev libutf8proc-dev pkgconf   # src/text: tokenizer regexes and Unicode normalisation
  libboost-dev   # io/: CRC-32C of TensorBoard event records (Boost.CRC, header-only)
  zlib1g-dev   # io/: crc32 of checkpoint tensors (libhdf5-openmpi-dev pulls it in; named as a direct dependency)
  python3-matplotlib)   # scripts/plot_metrics.py (and its test) draw metrics.jsonl
scripts/install_packages.sh "${packages[@]}"

jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
echo "setup: shardrl is at $(pwd)/build/$preset/src/app/shardrl"
