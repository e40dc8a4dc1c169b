// Internal to the model: the activation and scratch buffers of a Transformer, allocated once
// for (max_batch, max_seq_len), and the offsets of each parameter inside a unit buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "core/ledger_view.hpp"
#include "kernels/cudnn_attention.hpp"
#include "model/attention.hpp"
#include "model/transformer.hpp"

namespace shardrl {

// Untyped device bytes, counted in the memory ledger, in the model's arena placement if it has
// one; the element type (bf16 or fp32) is the model's compute type.
// Or a part of another's allocation (Activations::shared), which then counts it.
struct DeviceBytes {
  LedgerView<char> buffer;
  const DeviceBytes* within = nullptr;   // a part: the whole, its offset and its size in it
  std::size_t offset = 0, part_bytes = 0;
  DeviceBytes() = default;
  DeviceBytes(ArenaPlacement at, const char* label, std::size_t bytes,
              MemoryCategory category = MemoryCategory::activations)
      : buffer(at, category, label, bytes) {}
  static DeviceBytes part_of(const DeviceBytes& whole, std::size_t offset, std::size_t bytes) {
    SHARDRL_CHECK(offset + bytes <= whole.bytes(), "a shared buffer's part beyond its end");
    DeviceBytes part;
    part.within = &whole;
    part.offset = offset;
    part.part_bytes = bytes;
    return part;
  }
  template <class T> T* as() const {
    return reinterpret_cast<T*>(within ? within->as<char>() + offset : buffer.data());
  }
  std::size_t bytes() const { return within ? part_bytes : buffer.size(); }
};

// Allocates a model's buffers in its placement and keeps their total, so each buffer's size is
// written once, where it is allocated (its shape beside its declaration).
struct BufferMaker {
  ArenaPlacement at;
  std::size_t total = 0;
  DeviceBytes operator()(const char* label, std::size_t bytes, MemoryCategory category = MemoryCategory::activations) {
    total += bytes;
    return DeviceBytes(at, label, bytes, category);
  }
  // A buffer of its own allocation (not in the arena): kept across the phases.
  DeviceBytes kept(const char* label, std::size_t bytes, MemoryCategory category = MemoryCategory::activations) {
    total += bytes;
    return DeviceBytes(ArenaPlacement{}, label, bytes, category);
  }
  // A batch's int32 ids, never in the arena (set_batch fills them before each use).
  LedgerView<std::int32_t> ids(const char* label, std::size_t n) {
    total += n * sizeof(std::int32_t);
    return LedgerView<std::int32_t>(MemoryCategory::activations, label, n);
  }
};

// Offsets (elements) of a decoder layer's parameters in its unit buffer; -1 when absent.
struct LayerOffsets {
  std::int64_t input_norm, q, k, v, o, q_norm = -1, k_norm = -1, post_norm;
  std::int64_t gate = -1, up = -1, down = -1;   // the dense MLP, or an MoE layer's shared expert
  // MoE layers: the router, and expert 0's matrices; expert e's is at + e * its kind's stride.
  std::int64_t router = -1, expert_gate = -1, expert_up = -1, expert_down = -1;
  std::int64_t expert_stride_in = 0, expert_stride_out = 0;   // gate/up (Fe, D); down (D, Fe)
  // LoRA: each target's A (rank, in) and B (out, rank), by LoraTarget; -1 without an adapter.
  std::int64_t lora_a[kLoraTargets] = {-1, -1, -1, -1, -1, -1, -1};
  std::int64_t lora_b[kLoraTargets] = {-1, -1, -1, -1, -1, -1, -1};
  // LoRA on an MoE layer's experts (lora.experts): expert 0's A and B of gate, up, down (-1
  // without), expert e's one stride further; with expert parallelism, this rank's first expert.
  std::int64_t expert_lora_a[3] = {-1, -1, -1}, expert_lora_b[3] = {-1, -1, -1};
  std::int64_t expert_lora_stride = 0;
};

// What one decoder layer keeps from forward for backward. Its norms' outputs and its MLP's
// activation are not among them (Activations::h1, h2, mlp_a): backward recomputes them from the
// layer's input, xmid and the saved rstd, gate and up, which costs a pass over each and saves
// (2 d_model + d_ff) values per token per layer. Nor, with q/k norms, are the normed and rotated
// q and k (Activations::q_shared, k_shared): backward forms them again from q_raw and k_raw,
// saving (Hq + Hkv) values per token per layer (qwen3-0.6b at 4 096 tokens: 0.7 GB). An MoE
// layer keeps `a` (its shared expert's).
struct LayerActivations {
  DeviceBytes q_raw, k_raw, q, k, v, attn, xmid, g, u, a;   // compute type; q, k: see above
  DeviceBytes rstd1, rstd_q, rstd_k, lse, rstd2;             // fp32
  DeviceBytes lora;   // LoRA: (kLoraTargets, N, rank) of scale x A^T, compute type (only with LoRA)
};

struct Transformer::Activations {
  std::vector<DeviceBytes> residual;          // n_layers + 1 of (N, D): input of layer l; last: of head
                                              // (2, used in turn, for inference_only models)
  std::vector<LayerActivations> layers;       // n_layers of them, or 1 shared with recompute
  DeviceBytes recompute_out;                  // (N, D): a recomputed layer's (unused) output
  // One layer's worth, shared by the layers (see LayerActivations): the input norm's and the
  // post-attention norm's outputs (N, D) and a dense MLP's silu(gate) * up (N, F).
  DeviceBytes h1, h2, mlp_a;
  // A training model with q/k norms and a set of activations per layer: one layer's normed and
  // rotated q (N, Hq) and k (N, Hkv), which its LayerActivations then lack (Transformer::rotated).
  DeviceBytes q_shared, k_shared;
  // inference_only: (max_batch, max(Hq + 2 Hkv, 2 F)), compute type: a decode step's rows of one
  // product for q, k and v, then of one for gate and up (forward.cpp, past the matrix-vector
  // kernels' rows). Models built for training decode through the separate products.
  DeviceBytes decode_rows;
  DeviceBytes rope;                           // fp32 (N, head_dim): the batch's rotations (kernels::rope_table)
  DeviceBytes hf;                             // head: normed (head_tokens, D)
  // The logits of up to logits_tokens tokens, (logits_tokens, V): in training one chunk of the
  // batch at a time, and backward overwrites them with their gradient.
  DeviceBytes logits;
  // A training model's logits and the scratch that only a layer's forward or backward uses (the
  // attention's, and backward's but dres and dh, which the head's backward writes) in one
  // allocation, the larger of the two sides: the logits live from the head's forward to its
  // backward, after every layer's forward and before every layer's backward, so the two never
  // meet. A layer's forward (or a prefill) therefore drops the logits held (logits_count = 0);
  // the head's backward has already turned them into gradients before a layer's backward runs.
  // Empty for inference_only models, whose buffers are their own.
  DeviceBytes shared;
  DeviceBytes rstd_f, lse_tok, logp, dlogp, entropy, dentropy;   // fp32 (head_tokens)
  // A training batch with unscored tokens (Transformer::set_batch): the head runs on the
  // scored ones, compact. Their positions in the batch and targets (ids, scored_count of them),
  // and their fp32 logp (then dlogp), entropy and dentropy (head_tokens); hf then holds their
  // normed rows at the front, and lse_tok their statistics. Empty for inference_only models.
  LedgerView<std::int32_t> scored, scored_targets;
  Kokkos::View<std::int32_t*, MemSpace>::HostMirror scored_h, scored_targets_h;
  DeviceBytes scored_logp, scored_entropy, scored_dentropy;
  int scored_count = 0;
  bool compact_head = false;                  // this batch's head runs on the scored tokens only
  std::size_t head_tokens = 0;                // tokens the head buffers hold
  std::size_t logits_tokens = 0;              // tokens `logits` holds
  // Which tokens' logits `logits` holds now: [logits_first, logits_first + logits_count), or
  // none (logits_count = 0) once backward has turned them into gradients or a layer has run
  // (Activations::shared).
  int logits_first = 0, logits_count = 0;
  // Backward scratch, shared by all layers.
  DeviceBytes dres, dh, dq, dk, dv, dq_raw, dk_raw, dattn, da, dg, du;
  // Attention scratch, shared by all layers, of the model's implementation only. gemm: one
  // (row, kv head) block at a time (dk/dv: training only), sizes from model/gemm_attention.hpp.
  // flash: no S x S buffer at all; in training backward's fp32 row sums (N, n_heads).
  DeviceBytes attn_scores, attn_probs, attn_dk, attn_dv;
  DeviceBytes attn_delta;
  DeviceBytes lora_dt;                        // LoRA backward: (N, rank) of scale dy B, compute type
  DeviceBytes norm_scratch;                   // fp32, the RMSNorm weight gradient's partial sums
  std::unique_ptr<kernels::CudnnAttention> cudnn;   // model.attention = "cudnn": the plans
  DeviceBytes cudnn_workspace;                       // their workspace at (max_batch, max_seq_len)
  AttentionScratch attention_scratch() const {
    return {{attn_scores.as<float>(), attn_probs.as<char>(), attn_dk.as<float>(), attn_dv.as<float>()},
            attn_delta.as<float>(),
            cudnn.get(),
            cudnn_workspace.as<void>(),
            cudnn_workspace.bytes(),
            single_sequence_rows};
  }
  LedgerView<std::int32_t> tokens, targets, positions, slots;   // (N) each
  Kokkos::View<std::int32_t*, MemSpace>::HostMirror tokens_h, targets_h, positions_h, slots_h;
  // The batch's tokens grouped by id (kernels::group_tokens) for the embedding's backward:
  // positions in (id, position) order, then each group's start, N + 1 and the group count.
  LedgerView<std::int32_t> token_order, token_starts;   // (N), (N + 2); training only
  Kokkos::View<std::int32_t*, MemSpace>::HostMirror token_order_h, token_starts_h;
  bool decode_slots = false;                  // decode step rows address cache slots
  // A decode step of an inference_only model without tensor parallelism: every layer updates
  // residual[0] in place (its o and down products add into it), so no layer copies its residual
  // into xmid or its output (Transformer::residual, forward.cpp).
  bool decode_in_place = false;
  // set_batch without explicit positions: each row one right-padded sequence from position 0.
  // Batches set with positions (the RL train phase's, packed or not) keep the flash kernels,
  // so every micro-batch of a step, which one call site sets, gets the same pick: a captured
  // step replays one pick (the flag itself is host state, not restored by TrainStepGraphs::load).
  bool single_sequence_rows = true;

  std::vector<LayerOffsets> offsets;          // per layer
  std::int64_t head_norm = 0, head_lm = -1, embed = 0;

  std::size_t bytes = 0;                      // every buffer above (BufferMaker's total)
};

}  // namespace shardrl
