#!/usr/bin/env bash
# The whole test suite: set-up, then every test through ctest. Non-zero exit on any failure.
#   scripts/test.sh [preset] [ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=cpu-release
if [[ $# -gt 0 && $1 != -* ]]; then preset=$1; shift; fi
scripts/setup.sh "$preset"
# The Slurm test starts a private Slurm on this machine, as root (munged and slurmd); where it
# cannot, it reports itself skipped, with the reason, rather than passing. Not as root nothing is
# installed for it (the packages' own services would be set up for nothing).
if [[ $(id -u) -eq 0 ]]; then
  scripts/install_packages.sh slurm-wlm munge ||
    echo "test: slurm-wlm and munge could not be installed: the Slurm test will be skipped"
else
  echo "test: not root: the Slurm test (munged and slurmd run as root) will be skipped"
fi
# The fuzz test builds with clang and its libFuzzer runtime (Debian's clang has both).
scripts/install_packages.sh clang ||
  echo "test: clang could not be installed: the fuzz test will be skipped"
# The text tests compare with Hugging Face's own tokenizer and Jinja (npm); without npm they
# report themselves skipped, with the reason.
# The TensorBoard test reads the event file with Debian's protobuf runtime and crcmod.
scripts/install_packages.sh python3-protobuf protobuf-compiler python3-crcmod ||
  echo "test: python3-protobuf, protobuf-compiler or python3-crcmod could not be installed: the TensorBoard test will be skipped"
scripts/install_test_references.sh ||
  echo "test: the npm test references could not be installed: the tokenizer and chat-template parity tests will be skipped"
source scripts/mpi_env.sh
# OpenBLAS picks its kernels by CPU (or by OPENBLAS_CORETYPE, which some machine images set to
# Haswell). The suite compares runs whose products have other row counts bit for bit (eager
# decoding against graph buckets, one rank against four). Measured on an AMD EPYC (2026-11-28):
# with OpenBLAS's AVX-512 kernels the suite's rows got the same bits whatever rows shared their
# call; with its AVX2 ones (Haswell, Zen) they did not, and near-tie draws flipped. So where the
# CPU has AVX-512, the suite runs on those kernels.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
else
  echo "test: this CPU has no AVX-512: OpenBLAS's AVX2 kernels may give a row other bits in calls of other row counts, which the tests comparing such runs bit for bit can see"
fi
jobs=$(nproc 2>/dev/null || echo 2)
ctest --preset "$preset" -j "$jobs" "$@"
