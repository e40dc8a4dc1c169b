#!/usr/bin/env bash
# Builds the safetensors header fuzz target with clang (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer) and runs it for a bounded time from a seed corpus of valid and
# malformed headers. Exit 77 (ctest: skipped, with the reason) without clang or libFuzzer.
#   tests/fuzz/run_fuzz.sh SOURCE_DIR WORK_DIR SECONDS
set -uo pipefail
src=$1 work=$2 seconds=${3:-30}
mkdir -p "$work/corpus"
if ! command -v clang++ > /dev/null; then echo "fuzz: clang++ not installed: skipped"; exit 77; fi
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/src" -I"$src")
# core/error.hpp's InputError is all the parser needs from shardrl; fmt and nlohmann-json are
# Debian's (header-only fmt keeps the link to libFuzzer's runtime alone).
if ! clang++ "${flags[@]}" -DFMT_HEADER_ONLY "$src/tests/fuzz/fuzz_safetensors_header.cpp" \
     "$src/io/safetensors_header.cpp" -o "$work/fuzz_safetensors_header" 2> "$work/build.log"; then
  if grep -q "fuzzer" "$work/build.log" && grep -qi "cannot find\|not found" "$work/build.log"; then
    echo "fuzz: this clang has no libFuzzer runtime: skipped"; cat "$work/build.log"; exit 77
  fi
  cat "$work/build.log"; exit 1
fi
# Seeds: a valid file, and a few broken ones for the mutator to start from.
seed() { printf '%b' "$2" > "$work/corpus/$1"; }
seed valid '\x3a\x00\x00\x00\x00\x00\x00\x00{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}    \x00\x00\x80\x3f'
seed meta '\x1c\x00\x00\x00\x00\x00\x00\x00{"__metadata__":{"a":"b"}}  '
seed overlap '\x70\x00\x00\x00\x00\x00\x00\x00{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}}      \x00\x00\x00\x00\x00\x00'
seed short '\x05\x00'
cd "$work"
./fuzz_safetensors_header -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 corpus 2>&1 | tail -15
rc=${PIPESTATUS[0]}
echo "fuzz: exit $rc after ${seconds} s"
exit "$rc"
