#!/usr/bin/env bash
# One command for both sides of the GPU comparisons in docs/performance.md, on this machine:
# shardrl's train step against PyTorch FSDP2, and shardrl's decoding against Hugging Face
# `generate`. Prints each side's own lines, then a Markdown table with the ratios.
#   bench/compare_with_pytorch.sh [train|decode|all]
# Environment: MODELS (default "llama-1b qwen3-0.6b"), GPUS (default "1 2"), MBS (micro-batches,
# default 2), PEER_MODES (PyTorch's, default "eager compiled"), SEQ (default 2048), STEPS (default 10),
# RECOMPUTE (1: both sides recompute each layer's activations in backward, for long SEQ), BATCHES (decode, default "1 8 64"),
# OURS_SET (more shardrl settings for the train step, e.g. "model.cudnn_workspace_mib=9216"),
# BUILD (default build/cuda-release), PYTHON (default python3, with torch and transformers),
# DECODE_GRAPHS (1, the default: shardrl decodes through its CUDA graphs, rollout.cuda_graph =
# "decode", as the RL job runs it; 0: eager). Each side's whole output goes to LOGS (default a
# new temporary directory, printed), the peer's warnings (e.g. torch.compile's recompiles) too.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
models=${MODELS:-llama-1b qwen3-0.6b}
gpus=${GPUS:-1 2}
mbs_list=${MBS:-2}
modes=${PEER_MODES:-eager compiled}
seq=${SEQ:-2048}
ours_settings=(); theirs_recompute=()
[[ ${RECOMPUTE:-0} == 1 ]] && { ours_settings=(--set train.activation_recompute=true); theirs_recompute=(--recompute); }
for setting in ${OURS_SET:-}; do ours_settings+=(--set "$setting"); done
steps=${STEPS:-10}
batches=${BATCHES:-1 8 64}
build=${BUILD:-build/cuda-release}
python=${PYTHON:-python3}
# Unbound, as torchrun leaves the peer (Open MPI binds a rank to one core at np <= 2, which its
# NCCL proxy threads then share).
mpirun_flags=(--bind-to none)
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)
decode_settings=(); [[ ${DECODE_GRAPHS:-1} == 1 ]] && decode_settings=(--set rollout.cuda_graph=decode)
logs=${LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/compare_with_pytorch.XXXXXX")}
mkdir -p "$logs"
echo "compare_with_pytorch: each run's whole output in $logs"
for tool in "$build/bench/bench_train_step" "$build/bench/bench_decode"; do
  [[ -x $tool ]] || { echo "compare_with_pytorch: $tool not built (cmake --build $build)" >&2; exit 2; }
done
# The number after a label in a benchmark's line, e.g. "12345 tokens/s per GPU" -> 12345.
field() { sed -n "s|.* \([0-9][0-9.]*\) $1.*|\1|p" | head -1; }
# Generated tokens/s of a decode line ("... in 0.266 s  962 tokens/s  (8.32 ms per step ...").
decode_rate() { sed -nE 's/.* s +([0-9.]+) tokens\/s +\(.*/\1/p' | head -1; }

if [[ $what == train || $what == all ]]; then
  rows=()
  for m in $models; do
    for n in $gpus; do
      for mbs in $mbs_list; do
        echo "== train step: $m on $n GPU(s), micro-batch $mbs x $seq, $steps steps"
        ours=$(mpirun "${mpirun_flags[@]}" -np "$n" "$build/bench/bench_train_step" --set model.preset="$m" \
          --set train.micro_batch_size="$mbs" --set train.seq_len="$seq" "${ours_settings[@]}" --steps "$steps" 2>&1 |
          grep -v '^\[')
        echo "$ours"
        a=$(field "tokens/s per GPU" <<<"$ours")
        # The peer: PyTorch eager and with each decoder block compiled; the table takes the better.
        best=0
        cells=""
        for mode in $modes; do
          flag=(); [[ $mode == compiled ]] && flag=(--compile)
          log="$logs/torch_${m}_np${n}_mbs${mbs}_$mode.log"
          "$python" -m torch.distributed.run --nproc_per_node "$n" bench/torch_fsdp2.py --model "$m" \
            --micro-batch "$mbs" --seq "$seq" --steps "$steps" "${flag[@]}" "${theirs_recompute[@]}" > "$log" 2>&1
          theirs=$(grep -E "torch FSDP2|step " "$log")
          grep -qiE "recompil|graph break" "$log" && echo "(the peer's log mentions recompiles or graph breaks: $log)"
          echo "$theirs"
          b=$(field "tokens/s per GPU" <<<"$theirs")
          cells+=" ${b:-failed (log: $log)} |"
          best=$(awk -v b="${b:-0}" -v best="$best" 'BEGIN { print (b > best ? b : best) }')
        done
        ratio=$(awk -v a="${a:-0}" -v b="$best" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }')
        rows+=("| $m | $n | $mbs | ${a:-failed} |$cells $ratio |")
      done
    done
  done
  echo
  header="| shape | GPUs | micro-batch | shardrl tokens/s per GPU |"
  rule="| --- | --- | --- | --- |"
  for mode in $modes; do header+=" FSDP2 $mode |"; rule+=" --- |"; done
  echo "$header ratio to the better |"
  echo "$rule --- |"
  printf '%s\n' "${rows[@]}"
  echo
fi

if [[ $what == decode || $what == all ]]; then
  rows=()
  for m in $models; do
    echo "== decode: $m, batches $batches, 32 new tokens after 4 prompt tokens"
    # shellcheck disable=SC2086
    ours=$("$build/bench/bench_decode" --set model.preset="$m" "${decode_settings[@]}" --batch $batches \
      --new-tokens 32 --prompt-tokens 4 2>&1 | tee "$logs/decode_$m.log" | grep -v '^\[')
    echo "$ours"
    # shellcheck disable=SC2086
    theirs=$(cd bench && "$python" hf_generate.py --model "$m" --batch $batches --new-tokens 32 --prompt-tokens 4 2>&1 |
      tee "$logs/hf_generate_$m.log" | grep "HF generate")
    echo "$theirs"
    for b in $batches; do
      a=$(grep -E "batch +$b " <<<"$ours" | decode_rate)
      h=$(grep -E "batch +$b " <<<"$theirs" | decode_rate)
      # The share of the bound over the whole run (prefill included), not the decode steps' alone.
      share=$(grep -E "batch +$b " <<<"$ours" | sed -nE 's/.*bandwidth bound [0-9]+ tokens\/s: ([0-9]+)%.*/\1/p')
      ratio=$(awk -v a="${a:-0}" -v b="${h:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }')
      rows+=("| $m | $b | ${a:-failed} | ${h:-failed} | $ratio | ${share:-?}% |")
    done
  done
  echo
  echo "| shape | batch | shardrl tokens/s (${decode_settings[*]:-eager}) | HF generate tokens/s | ratio | shardrl of the bandwidth bound |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
fi
