#!/usr/bin/env bash
# Weak and strong scaling of the fully-sharded train step, with the peers the numbers are
# judged against, all from one command on one machine:
#   * weak: MBS x SEQ tokens per GPU at every GPU count: tokens/s per GPU, efficiency against 1 GPU;
#   * strong: GLOBAL sequences of SSEQ tokens in all, split across the GPUs: step time, speed-up
#     and efficiency against 1 GPU;
#   * the step's all-gather and reduce-scatter bus bandwidth (phases fenced) against plain
#     collectives of the same sizes in the same process (bench_train_step --collectives);
#   * PyTorch FSDP2 (bench/torch_fsdp2.py) on the weak configuration, if PyTorch is there.
#   bench/scaling.sh            (environment: MODEL=llama-1b GPUS="1 2 4 8" MBS=2 SEQ=2048
#                                GLOBAL=8 SSEQ=1024 STEPS=10 BUILD=build/cuda-release PYTHON=python3;
#                                HAVE=N: run up to N ranks where nvidia-smi finds no GPU, e.g. a CPU build)
# GPU counts above the machine's are left out and named. Prints each run's lines, then Markdown.
set -uo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-llama-1b}
mbs=${MBS:-2}
seq=${SEQ:-2048}
global=${GLOBAL:-8}
sseq=${SSEQ:-1024}
steps=${STEPS:-10}
build=${BUILD:-build/cuda-release}
python=${PYTHON:-python3}
bench="$build/bench/bench_train_step"
[[ -x $bench ]] || { echo "scaling: $bench not built (cmake --build $build)" >&2; exit 2; }
have=${HAVE:-$(nvidia-smi -L 2>/dev/null | wc -l)}   # HAVE: ranks to allow without GPUs (CPU builds)
[[ $have -ge 1 ]] || have=1
gpus=()
skipped=()
for n in ${GPUS:-1 2 4 8}; do
  if [[ $n -le $have ]]; then gpus+=("$n"); else skipped+=("$n"); fi
done
mpirun_flags=(--bind-to none)
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
field() { sed -n "s|.* \([0-9][0-9.]*\) $1.*|\1|p" | head -1; }
ours() {   # ours N MBS SEQLEN [extra...]
  local n=$1 b=$2 s=$3
  shift 3
  mpirun "${mpirun_flags[@]}" -np "$n" "$bench" --set model.preset="$model" --set train.micro_batch_size="$b" \
    --set train.seq_len="$s" --steps "$steps" "$@" 2>&1 | grep -v '^\['
}
declare -A weak strong ag rs ag_plain rs_plain torch
for n in "${gpus[@]}"; do
  echo "== weak: $model on $n GPU(s), $mbs x $seq per GPU"
  out=$(ours "$n" "$mbs" "$seq")
  echo "$out"
  weak[$n]=$(echo "$out" | field "tokens/s per GPU")
  echo "== collectives: $model on $n GPU(s)"
  out=$(ours "$n" "$mbs" "$seq" --collectives)
  echo "$out"
  ag[$n]=$(echo "$out" | grep -o 'all-gathers.*' | grep -o 'bus [0-9.]*' | head -1 | cut -d' ' -f2)
  rs[$n]=$(echo "$out" | grep -o 'reduce-scatters.*' | grep -o 'bus [0-9.]*' | head -1 | cut -d' ' -f2)
  ag_plain[$n]=$(echo "$out" | grep -o 'all-gather bus [0-9.]*' | head -1 | cut -d' ' -f3)
  rs_plain[$n]=$(echo "$out" | grep -o 'reduce-scatter bus [0-9.]*' | head -1 | cut -d' ' -f3)
  if (( global % n == 0 )); then
    echo "== strong: $model, $global x $sseq in all, on $n GPU(s)"
    out=$(ours "$n" $(( global / n )) "$sseq")
    echo "$out"
    strong[$n]=$(echo "$out" | sed -n 's|.*step \([0-9.]*\) ms.*|\1|p' | head -1)
  fi
  if "$python" -c "import torch" 2>/dev/null; then
    echo "== PyTorch FSDP2: $model on $n GPU(s), $mbs x $seq per GPU"
    out=$("$python" -m torch.distributed.run --nproc_per_node "$n" bench/torch_fsdp2.py --model "$model" \
      --micro-batch "$mbs" --seq "$seq" --steps "$steps" 2>&1 | grep -E "torch FSDP2|step ")
    echo "$out"
    torch[$n]=$(echo "$out" | field "tokens/s per GPU")
  fi
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.0f%%", 100 * a / b }'; }
echo
echo "| GPUs | weak: tokens/s per GPU | weak efficiency | FSDP2 tokens/s per GPU | shardrl / FSDP2 | strong: ms per step | strong efficiency | all-gather bus GB/s (plain) | reduce-scatter bus GB/s (plain) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for n in "${gpus[@]}"; do
  w=${weak[$n]:-}; t=${torch[$n]:-}; st=${strong[$n]:-}
  eff=$(ratio "$w" "${weak[${gpus[0]}]:-}")
  # Strong efficiency: T(1) / (n x T(n)).
  seff=$(awk -v a="${strong[${gpus[0]}]:-}" -v b="$st" -v n="$n" -v n0="${gpus[0]}" \
    'BEGIN { if (a == "" || b == "") print "-"; else printf "%.0f%%", 100 * a * n0 / (n * b) }')
  echo "| $n | ${w:--} | $eff | ${t:--} | $(ratio "$w" "$t") | ${st:--} | $seff | ${ag[$n]:--} (${ag_plain[$n]:--}) | ${rs[$n]:--} (${rs_plain[$n]:--}) |"
done
[[ ${#skipped[@]} -gt 0 ]] && echo && echo "not run (this machine has $have GPU(s)): ${skipped[*]} GPUs"
exit 0
