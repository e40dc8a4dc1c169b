// Construction (buffers allocated once), batch input, and dispatch of the per-unit steps to
// the compute type (bf16 or fp32).
#include "model/transformer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/embedding.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/rmsnorm.hpp"
#include "model/activations.hpp"
#include "model/moe_layers.hpp"
#include "model/weight_gradients.hpp"

namespace shardrl {
namespace {

LayerOffsets layer_offsets(const UnitSpec& u) {
  LayerOffsets o;
  for (int t = 0; t < kLoraTargets; ++t) {   // LoRA's adapters: the attention's in every layer, the MLP's in dense ones
    const std::string module = std::string(".") + kLoraModules[t];
    if (!u.has(module + ".lora_A.weight")) continue;
    o.lora_a[t] = u.param(module + ".lora_A.weight").offset;
    o.lora_b[t] = u.param(module + ".lora_B.weight").offset;
  }
  o.input_norm = u.param(".input_layernorm.weight").offset;
  o.q = u.param(".q_proj.weight").offset;
  o.k = u.param(".k_proj.weight").offset;
  o.v = u.param(".v_proj.weight").offset;
  o.o = u.param(".o_proj.weight").offset;
  if (u.has(".q_norm.weight")) {
    o.q_norm = u.param(".q_norm.weight").offset;
    o.k_norm = u.param(".k_norm.weight").offset;
  }
  o.post_norm = u.param(".post_attention_layernorm.weight").offset;
  if (u.has(".mlp.gate.weight")) {   // MoE
    o.router = u.param(".mlp.gate.weight").offset;
    o.expert_gate = u.param(".experts.0.gate_proj.weight").offset;
    o.expert_up = u.param(".experts.0.up_proj.weight").offset;
    o.expert_down = u.param(".experts.0.down_proj.weight").offset;
    // Expert-major blocks of equal size: the next expert's matrices are one block further. (With
    // LoRA the layer's adapters follow the experts.)
    const std::int64_t experts_end = u.adapters_begin >= 0 ? u.adapters_begin : u.numel;
    const std::int64_t block = (experts_end - u.experts_begin) / u.param(".mlp.gate.weight").shape[0];
    o.expert_stride_in = o.expert_stride_out = block;
    if (u.has(".experts.0.gate_proj.lora_A.weight")) {
      const char* names[3] = {".experts.0.gate_proj", ".experts.0.up_proj", ".experts.0.down_proj"};
      for (int j = 0; j < 3; ++j) {
        o.expert_lora_a[j] = u.param(std::string(names[j]) + ".lora_A.weight").offset;
        o.expert_lora_b[j] = u.param(std::string(names[j]) + ".lora_B.weight").offset;
      }
      if (u.has(".experts.1.gate_proj.lora_A.weight"))
        o.expert_lora_stride = u.param(".experts.1.gate_proj.lora_A.weight").offset - o.expert_lora_a[0];
    }
    if (u.has(".shared_expert.gate_proj.weight")) {
      o.gate = u.param(".shared_expert.gate_proj.weight").offset;
      o.up = u.param(".shared_expert.up_proj.weight").offset;
      o.down = u.param(".shared_expert.down_proj.weight").offset;
    }
    return o;
  }
  o.gate = u.param(".gate_proj.weight").offset;
  o.up = u.param(".up_proj.weight").offset;
  o.down = u.param(".down_proj.weight").offset;
  return o;
}

}  // namespace

Transformer::Transformer(const ModelOptions& options, const ExecSpace& space)
    : options_(options), space_(space), units_(model_units(options.shape)),
      gemm_(std::make_unique<Gemm>(space, options.arena)),
      wgrad_(std::make_unique<WeightGradients>(options.gradient_accumulation_fusion, *gemm_, space)),
      act_(std::make_unique<Activations>()) {
  const ModelShape& s = options_.shape;
  SHARDRL_CHECK(options_.max_seq_len <= s.max_seq_len, "sequence length beyond the model's max_seq_len");
  // The config refuses model.attention = "flash" where it cannot run; a model built directly
  // (tests, benchmarks) is checked here, before any buffer is sized for it.
  if (fused_attention(options_.attention)) {   // cudnn falls back to the flash kernels
    SHARDRL_CHECK(kernels::flash_attention_available(), "flash attention needs a GPU build");
    SHARDRL_CHECK(options_.precision == Precision::bf16, "flash attention takes bf16 only");
    SHARDRL_CHECK(kernels::flash_attention_supports_head_dim(s.head_dim),
                  fmt::format("flash attention does not take head_dim {}", s.head_dim));
  }
  const std::size_t N = tokens_per_forward();
  SHARDRL_CHECK(N >= std::size_t(options_.max_batch) && N <= std::size_t(options_.max_batch) * options_.max_seq_len,
                fmt::format("max_tokens {} outside [max_batch {}, max_batch x max_seq_len]", options_.max_tokens,
                            options_.max_batch));
  const std::size_t D = s.d_model, V = s.vocab_size;
  // The dense MLP's hidden buffers, per layer as wide as its MLP: a dense layer's d_ff, an MoE
  // layer's shared expert's d_ff_expert (the routed experts have their own, MoeLayers), or
  // none. F: the widest, for the buffers one layer at a time uses.
  const auto mlp_width = [&](int l) -> std::size_t {
    return s.moe_layer(l) ? (s.shared_expert ? s.d_ff_expert : 0) : s.d_ff;
  };
  std::size_t F = 0;
  bool any_moe = false;
  for (int l = 0; l < s.n_layers; ++l) {
    any_moe |= s.moe_layer(l);
    F = std::max(F, mlp_width(l));
  }
  const std::size_t Hq = std::size_t(s.n_heads) * s.head_dim, Hkv = std::size_t(s.n_kv_heads) * s.head_dim;
  const std::size_t es = compute_type_size(), f4 = sizeof(float);
  Activations& a = *act_;
  BufferMaker make{options_.arena};

  const bool inference = options_.inference_only;
  SHARDRL_CHECK(!(inference && options_.activation_recompute), "inference_only models keep no activations to recompute");
  // Training: the buffers placed in Activations::shared (see there), allocated below once all
  // are sized, counted with it as activations (their category stands for inference_only
  // models, which allocate each on its own).
  struct SharedPart {
    DeviceBytes* buffer;
    std::size_t bytes;
  };
  std::vector<SharedPart> parts;
  const auto share = [&](DeviceBytes& buffer, const char* label, std::size_t bytes,
                         MemoryCategory category = MemoryCategory::activations) {
    if (inference)
      buffer = make(label, bytes, category);
    else
      parts.push_back({&buffer, bytes});
  };
  for (int l = 0; l <= (inference ? 1 : s.n_layers); ++l) a.residual.push_back(make("residual", N * D * es));
  const int stored = (options_.activation_recompute || inference) ? 1 : s.n_layers;
  // With q/k norms backward forms a layer's normed and rotated q and k again (activations.hpp).
  const bool share_qk = s.qk_norm && stored > 1;
  if (share_qk) {
    a.q_shared = make("q_shared", N * Hq * es);
    a.k_shared = make("k_shared", N * Hkv * es);
  }
  for (int l = 0; l < stored; ++l) {
    LayerActivations la;
    if (s.qk_norm) {
      la.q_raw = make("q_raw", N * Hq * es);
      la.k_raw = make("k_raw", N * Hkv * es);
      la.rstd_q = make("rstd_q", N * s.n_heads * f4);
      la.rstd_k = make("rstd_k", N * s.n_kv_heads * f4);
    }
    if (!share_qk) {
      la.q = make("q", N * Hq * es);
      la.k = make("k", N * Hkv * es);
    }
    la.v = make("v", N * Hkv * es);
    la.attn = make("attn", N * Hq * es);
    la.lse = make("lse", N * s.n_heads * f4);
    la.xmid = make("xmid", N * D * es);
    const std::size_t Fl = stored == 1 ? F : mlp_width(l);
    if (Fl > 0) {
      la.g = make("g", N * Fl * es);
      la.u = make("u", N * Fl * es);
    }
    // An MoE layer's shared expert keeps its activation; the shared set serves every layer.
    if (s.shared_expert && (stored == 1 ? any_moe : s.moe_layer(l))) la.a = make("a", N * s.d_ff_expert * es);
    la.rstd1 = make("rstd1", N * f4);
    la.rstd2 = make("rstd2", N * f4);
    if (s.lora.on()) la.lora = make("lora", kLoraTargets * N * s.lora.rank * es);
    a.layers.push_back(std::move(la));
  }
  if (options_.activation_recompute) a.recompute_out = make("recompute_out", N * D * es);
  a.h1 = make("h1", N * D * es);
  a.h2 = make("h2", N * D * es);
  a.mlp_a = make("mlp_a", N * F * es);
  if (inference)
    a.decode_rows = make("decode_rows", std::size_t(options_.max_batch) * std::max(Hq + 2 * Hkv, 2 * F) * es);
  a.rope = make("rope", N * s.head_dim * f4);
  // The head runs on every token in training, on one token per row in generation; its logits
  // exist for at most logits_chunk_tokens tokens at once (training) and hold their own gradient
  // in backward.
  const std::size_t H = inference ? std::size_t(options_.max_batch) : N;
  const std::size_t chunk = inference || options_.logits_chunk_tokens <= 0
                                ? H
                                : std::min<std::size_t>(H, std::size_t(options_.logits_chunk_tokens));
  a.hf = make("hf", H * D * es);
  if (inference) a.logits = make("logits", chunk * V * es);
  a.logits_tokens = chunk;
  a.rstd_f = make("rstd_f", H * f4);
  a.lse_tok = make("lse_tok", H * f4);
  a.logp = make("logp", H * f4);
  a.dlogp = make("dlogp", H * f4);
  a.entropy = make("entropy", H * f4);
  a.dentropy = make("dentropy", H * f4);
  a.head_tokens = H;
  if (!inference) {   // the scored tokens' head values (Activations::scored), backward scratch
    a.scored_logp = make("scored_logp", H * f4);
    a.scored_entropy = make("scored_entropy", H * f4);
    a.scored_dentropy = make("scored_dentropy", H * f4);
    a.dres = make("dres", N * D * es);
    a.dh = make("dh", N * D * es);
    share(a.dq, "dq", N * Hq * es);
    share(a.dk, "dk", N * Hkv * es);
    share(a.dv, "dv", N * Hkv * es);
    if (s.qk_norm) {
      share(a.dq_raw, "dq_raw", N * Hq * es);
      share(a.dk_raw, "dk_raw", N * Hkv * es);
    }
    share(a.dattn, "dattn", N * Hq * es);
    share(a.da, "da", N * F * es);
    share(a.dg, "dg", N * F * es);
    share(a.du, "du", N * F * es);
    if (s.lora.on()) a.lora_dt = make("lora_dt", N * s.lora.rank * es);
    if (!options_.gradient_accumulation_fusion) {
      std::size_t largest = 0;
      for (const auto& u : units_)
        for (const auto& p : u.params) largest = std::max<std::size_t>(largest, p.numel());
      wgrad_->allocate_scratch(make, largest);
    }
  }
  {
    // Attention scratch for the largest batch.
    const kernels::AttentionShape largest{options_.max_batch, options_.max_seq_len, s.n_heads, s.n_kv_heads,
                                          s.head_dim};
    if (fused_attention(options_.attention)) {
      // The flash kernels keep the scores in registers: nothing of S x S, only backward's row sums.
      if (!inference)
        share(a.attn_delta, "attn_delta", kernels::flash_attention_backward_workspace_bytes(largest),
              MemoryCategory::workspace);
      // cuDNN serves the batches set without positions (not prefill, so not inference-only
      // models); its workspace is sized for the largest batch, where smaller ones fit.
      if (options_.attention == AttentionImpl::cudnn && !inference) {
        a.cudnn = std::make_unique<kernels::CudnnAttention>();
        if (a.cudnn->prepare(largest, true, options_.cudnn_workspace_bytes)) {
          const std::size_t workspace = a.cudnn->workspace_bytes(largest);
          if (workspace > 0) share(a.cudnn_workspace, "cudnn_workspace", workspace, MemoryCategory::workspace);
        } else {
          spdlog::warn(fmt::format("model.attention = \"cudnn\": {}; training attention takes the flash kernels",
                                   a.cudnn->why()));
          a.cudnn.reset();
          options_.attention = AttentionImpl::flash;   // what runs, for the build report
        }
      }
    } else {
      // One (row, kv head) block of scores at a time.
      const AttentionWorkspaceSizes w = attention_workspace_bytes(largest, es, !inference);
      share(a.attn_scores, "attn_scores", w.scores, MemoryCategory::workspace);
      share(a.attn_probs, "attn_probs", w.probs, MemoryCategory::workspace);
      if (!inference) {
        share(a.attn_dk, "attn_dk", w.dkv, MemoryCategory::workspace);
        share(a.attn_dv, "attn_dv", w.dkv, MemoryCategory::workspace);
      }
      if (options_.precision == Precision::bf16) reserve_attention_gemms(*gemm_, largest);
    }
    if (!inference) a.norm_scratch = make("norm_scratch", kernels::kRmsnormDwScratch * f4, MemoryCategory::workspace);
  }
  if (!inference) {
    // The logits at the start, the scratch one part after another, each 256-byte aligned.
    const auto aligned = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
    std::size_t scratch = 0;
    for (const SharedPart& p : parts) scratch += aligned(p.bytes);
    a.shared = make("logits_and_layer_scratch", std::max(aligned(chunk * V * es), scratch));
    a.logits = DeviceBytes::part_of(a.shared, 0, chunk * V * es);
    std::size_t at = 0;
    for (const SharedPart& p : parts) {
      *p.buffer = DeviceBytes::part_of(a.shared, at, p.bytes);
      at += aligned(p.bytes);
    }
  }
  a.tokens = make.ids("tokens", N);
  a.targets = make.ids("targets", N);
  a.positions = make.ids("positions", N);
  a.slots = make.ids("cache_slots", N);
  a.slots_h = Kokkos::create_mirror_view(a.slots.view());
  a.tokens_h = Kokkos::create_mirror_view(a.tokens.view());
  if (!inference) {
    a.token_order = make.ids("token_order", N);
    a.token_starts = make.ids("token_starts", N + 2);
    a.token_order_h = Kokkos::create_mirror_view(a.token_order.view());
    a.token_starts_h = Kokkos::create_mirror_view(a.token_starts.view());
    a.scored = make.ids("scored", N);
    a.scored_targets = make.ids("scored_targets", N);
    a.scored_h = Kokkos::create_mirror_view(a.scored.view());
    a.scored_targets_h = Kokkos::create_mirror_view(a.scored_targets.view());
  }
  a.targets_h = Kokkos::create_mirror_view(a.targets.view());
  a.positions_h = Kokkos::create_mirror_view(a.positions.view());

  for (int l = 0; l < s.n_layers; ++l) a.offsets.push_back(layer_offsets(units_[1 + l]));
  // LoRA with expert parallelism: a training gather holds this rank's experts only, with the
  // layer's adapters right after them (fsdp/shard_layout.hpp, UnitShard::adapters_at).
  if (options_.expert_exchange && s.lora.on())
    for (int l = 0; l < s.n_layers; ++l) {
      const UnitSpec& u = units_[1 + l];
      if (u.experts_begin < 0 || u.adapters_begin < 0) continue;
      const std::int64_t span = u.adapters_begin - u.experts_begin, ranks = options_.expert_exchange->ranks();
      const std::int64_t shift = span - span / ranks;
      LayerOffsets& o = a.offsets[l];
      for (int t = 0; t < kLoraTargets; ++t)
        if (o.lora_a[t] >= 0) {
          o.lora_a[t] -= shift;
          o.lora_b[t] -= shift;
        }
      // The experts' adapters are gathered for every expert: this rank's start at its first.
      const std::int64_t first = std::int64_t(options_.expert_exchange->rank()) * (s.n_experts / ranks);
      for (int j = 0; j < 3; ++j)
        if (o.expert_lora_a[j] >= 0) {
          o.expert_lora_a[j] += first * o.expert_lora_stride - shift;
          o.expert_lora_b[j] += first * o.expert_lora_stride - shift;
        }
    }
  a.head_norm = units_.back().param("model.norm.weight").offset;
  if (!s.tie_embeddings) a.head_lm = units_.back().param("lm_head.weight").offset;

  if (any_moe) {
    gemm_->reserve_groups(s.n_experts);
    moe_ = std::make_unique<MoeLayers>(options_, space_, *gemm_, *wgrad_, N, stored, !inference, make);
  }
  a.bytes = make.total;
  // The host GEMM backend widens bf16 operands in a workspace: size it now, not in a step.
  // Every product involves one weight (out, in) and N tokens: forward (N, out, in), input
  // gradient (N, in, out) and weight gradient (out, in, N) need the same N*in + in*out + N*out.
  if (options_.precision == Precision::bf16)
    for (const auto& u : units_)
      for (const auto& p : u.params)
        if (p.shape.size() == 2) gemm_->reserve(static_cast<long>(N), p.shape[0], p.shape[1]);
}

Transformer::~Transformer() = default;

std::size_t Transformer::tokens_per_forward() const {
  return options_.max_tokens > 0 ? std::size_t(options_.max_tokens)
                                 : std::size_t(options_.max_batch) * options_.max_seq_len;
}

std::size_t Transformer::compute_type_size() const {
  return options_.precision == Precision::bf16 ? sizeof(bf16) : sizeof(float);
}

std::size_t Transformer::activation_bytes() const { return act_->bytes; }

const WgradCounters& Transformer::wgrad_counters() const { return wgrad_->counters(); }

long Transformer::cudnn_attention_calls() const {
  return act_->cudnn ? act_->cudnn->forward_calls() + act_->cudnn->backward_calls() : 0;
}

void Transformer::add_replayed_counts(const WgradCounters& replayed) { wgrad_->count(replayed); }

const MoeCallCounters& Transformer::moe_calls() const {
  static const MoeCallCounters none;
  return moe_ ? moe_->calls() : none;
}

void Transformer::set_aux_loss_weight(float weight) {
  if (moe_) moe_->set_aux_loss_weight(weight);
}

void Transformer::reset_aux_loss() {
  if (moe_) moe_->reset_aux_loss();
}

double Transformer::aux_loss() const { return moe_ ? moe_->aux_loss() : 0.0; }

void Transformer::set_batch(const std::int32_t* tokens, const std::int32_t* targets, int B, int S,
                            const std::int32_t* positions, const std::int32_t* row_tokens) {
  SHARDRL_CHECK(B >= 1 && B <= options_.max_batch && S >= 1 && S <= options_.max_seq_len &&
                    std::size_t(B) * S <= tokens_per_forward(),
                fmt::format("batch ({}, {}) outside the buffers' ({}, {}), {} tokens", B, S, options_.max_batch,
                            options_.max_seq_len, tokens_per_forward()));
  B_ = B;
  S_ = S;
  Activations& a = *act_;
  const int V = options_.shape.vocab_size;
  const bool training = a.scored.size() > 0;
  a.scored_count = 0;
  for (int i = 0; i < B * S; ++i) {
    const bool target_ok = (targets[i] >= 0 && targets[i] < V) || targets[i] == kUnscoredTarget;
    SHARDRL_CHECK(tokens[i] >= 0 && tokens[i] < V && target_ok,
                  fmt::format("token id out of range [0, {}) at position {}", V, i));
    a.tokens_h(i) = tokens[i];
    a.targets_h(i) = targets[i];
    if (training && targets[i] != kUnscoredTarget) {
      a.scored_h(a.scored_count) = i;
      a.scored_targets_h(a.scored_count++) = targets[i];
    }
    const std::int32_t pos = positions ? positions[i] : i % S;
    // A sequence starts at position 0, counts up by one and stays inside its row.
    SHARDRL_CHECK(pos >= 0 && pos <= i % S && (pos == 0 || pos == a.positions_h(i - 1) + 1),
                  fmt::format("position {} of token {} does not continue a sequence in its row", pos, i));
    a.positions_h(i) = pos;
    a.slots_h(i) = i / S;   // prefill: row b of the batch is cache slot b
  }
  a.decode_slots = false;
  a.decode_in_place = false;
  a.single_sequence_rows = positions == nullptr;
  // Whole-buffer copies (views of equal extent); only the first B*S entries are used.
  Kokkos::deep_copy(space_, a.tokens.view(), a.tokens_h);
  Kokkos::deep_copy(space_, a.targets.view(), a.targets_h);
  Kokkos::deep_copy(space_, a.positions.view(), a.positions_h);
  Kokkos::deep_copy(space_, a.slots.view(), a.slots_h);
  a.compact_head = training && !score_every_token_ && a.scored_count < B * S;
  if (a.compact_head) {
    Kokkos::deep_copy(space_, a.scored.view(), a.scored_h);
    Kokkos::deep_copy(space_, a.scored_targets.view(), a.scored_targets_h);
  }
  if (a.token_order.size() > 0) {   // training: the embedding backward's grouping
    const int N = B * S;
    a.token_starts_h(N + 1) = kernels::group_tokens(a.tokens_h.data(), N, a.token_order_h.data(), a.token_starts_h.data());
    Kokkos::deep_copy(space_, a.token_order.view(), a.token_order_h);
    Kokkos::deep_copy(space_, a.token_starts.view(), a.token_starts_h);
  }
  if (moe_) moe_->set_counted_tokens(row_tokens, B, S);
}

void Transformer::set_prefill_sequences(const std::int32_t* sequences) {
  SHARDRL_CHECK(B_ > 0 && !act_->decode_slots, "set_prefill_sequences after set_batch");
  Activations& a = *act_;
  for (int i = 0; i < B_ * S_; ++i) {
    SHARDRL_CHECK(sequences[i / S_] >= 0, "a negative cache sequence");
    a.slots_h(i) = sequences[i / S_];
  }
  Kokkos::deep_copy(space_, a.slots.view(), a.slots_h);
}

std::vector<DeviceRegion> Transformer::batch_inputs() const {
  Activations& a = *act_;
  std::vector<DeviceRegion> out;
  for (const auto* v : {&a.tokens, &a.targets, &a.positions, &a.slots, &a.token_order, &a.token_starts})
    if (v->size() > 0) out.push_back(DeviceRegion{v->data(), v->size() * sizeof(std::int32_t)});
  return out;
}

void Transformer::set_decode_step(const std::int32_t* tokens, const std::int32_t* positions, int rows,
                                  const std::int32_t* slots) {
  SHARDRL_CHECK(rows >= 1 && rows <= options_.max_batch,
                fmt::format("decode step of {} rows on a model built for {} rows", rows, options_.max_batch));
  B_ = rows;
  S_ = 1;
  Activations& a = *act_;
  a.compact_head = false;
  const int V = options_.shape.vocab_size;
  for (int r = 0; r < rows; ++r) {
    SHARDRL_CHECK(tokens[r] >= 0 && tokens[r] < V,
                  fmt::format("token id {} out of range [0, {}){}", tokens[r], V,
                              tokens[r] == -1 ? " (the sampler's mark of a row whose logits were all NaN: the model "
                                                "diverged)"
                                              : ""));
    SHARDRL_CHECK(positions[r] >= 0, "negative position");
    a.tokens_h(r) = tokens[r];
    a.positions_h(r) = positions[r];
    a.slots_h(r) = slots ? slots[r] : r;
  }
  a.decode_slots = slots != nullptr;
  a.decode_in_place = options_.inference_only && options_.tensor_parallel == nullptr;
  // The step's rows only (the buffers hold a prefill call's or a batch's tokens); a decode step
  // computes no target log-probabilities, so the targets stay as they are.
  const auto step = std::make_pair(std::size_t(0), std::size_t(rows));
  Kokkos::deep_copy(space_, Kokkos::subview(a.tokens.view(), step), Kokkos::subview(a.tokens_h, step));
  Kokkos::deep_copy(space_, Kokkos::subview(a.positions.view(), step), Kokkos::subview(a.positions_h, step));
  Kokkos::deep_copy(space_, Kokkos::subview(a.slots.view(), step), Kokkos::subview(a.slots_h, step));
}

void Transformer::decode_unit(int u, const void* weights, KvCache& cache, const void* tied_embedding) {
  SHARDRL_CHECK(B_ > 0 && S_ == 1, "decode_unit before set_decode_step");
  SHARDRL_CHECK(cache.rows() >= B_, "KV cache has fewer rows than the decode step");
  if (act_->decode_slots)
    for (int r = 0; r < B_; ++r)
      SHARDRL_CHECK(act_->slots_h(r) >= 0 && act_->slots_h(r) < cache.rows(), "cache slot out of range");
  // A position past the cache's would write the next sequence's entries (contiguous) or read
  // another sequence's block table (paged).
  for (int r = 0; r < B_; ++r)
    SHARDRL_CHECK(act_->positions_h(r) < cache.max_len(),
                  fmt::format("decode position {} past the KV cache's {} positions", act_->positions_h(r),
                              cache.max_len()));
  const bool half = options_.precision == Precision::bf16;
  if (u == 0) return forward_unit(u, weights);
  if (u == head_unit()) {
    SHARDRL_CHECK(!options_.shape.tie_embeddings || tied_embedding, "tied head needs the embedding weights");
    return half ? head_forward(static_cast<const bf16*>(weights), static_cast<const bf16*>(tied_embedding), false)
                : head_forward(static_cast<const float*>(weights), static_cast<const float*>(tied_embedding), false);
  }
  half ? layer_forward(u - 1, static_cast<const bf16*>(weights), false, &cache)
       : layer_forward(u - 1, static_cast<const float*>(weights), false, &cache);
}

void Transformer::prefill_unit(int u, const void* weights, KvCache& cache) {
  SHARDRL_CHECK(B_ > 0, "prefill_unit before set_batch");
  SHARDRL_CHECK(u != head_unit(), "prefill runs the embedding and the layers, not the head");
  SHARDRL_CHECK(cache.rows() >= B_ && cache.max_len() >= S_, "KV cache smaller than the prefill batch");
  for (int i = 0; i < B_ * S_; i += S_)
    SHARDRL_CHECK(act_->slots_h(i) >= 0 && act_->slots_h(i) < cache.rows(), "prefill cache sequence out of range");
  if (u == 0) return forward_unit(0, weights);
  const bool half = options_.precision == Precision::bf16;
  half ? layer_forward(u - 1, static_cast<const bf16*>(weights), false, &cache, true)
       : layer_forward(u - 1, static_cast<const float*>(weights), false, &cache, true);
}

template <class T>
T* Transformer::residual(int i) const {
  if (act_->decode_in_place) return act_->residual[0].as<T>();
  return act_->residual[options_.inference_only ? i % 2 : i].as<T>();
}
template float* Transformer::residual<float>(int) const;
template bf16* Transformer::residual<bf16>(int) const;

template <class T>
Transformer::Rotated<T> Transformer::rotated(const LayerActivations& a) const {
  const bool shared = act_->q_shared.bytes() > 0;
  return {(shared ? act_->q_shared : a.q).as<T>(), (shared ? act_->k_shared : a.k).as<T>()};
}
template Transformer::Rotated<float> Transformer::rotated<float>(const LayerActivations&) const;
template Transformer::Rotated<bf16> Transformer::rotated<bf16>(const LayerActivations&) const;

void Transformer::set_token_distribution(const TokenDistribution& d) {
  SHARDRL_CHECK(d.temperature > 0.0f && std::isfinite(d.temperature),
                fmt::format("token distribution at temperature {}", d.temperature));
  distribution_ = d;
}

const float* Transformer::logp() const { return act_->logp.as<float>(); }
const float* Transformer::entropy() const { return act_->entropy.as<float>(); }
float* Transformer::dlogp() { return act_->dlogp.as<float>(); }
float* Transformer::dentropy() { return act_->dentropy.as<float>(); }
const void* Transformer::logits() const {
  SHARDRL_CHECK(act_->logits_first == 0 && act_->logits_count == B_ * S_,
                "the logits of the last forward were computed in chunks (train.logits_chunk_tokens), "
                "turned into gradients by backward, or overwritten by a layer's scratch since");
  return act_->logits.as<void>();
}

void Transformer::forward_unit(int u, const void* weights, const void* tied_embedding) {
  SHARDRL_CHECK(B_ > 0, "forward before set_batch");
  const bool half = options_.precision == Precision::bf16;
  if (u == 0) {
    half ? embed_forward(static_cast<const bf16*>(weights)) : embed_forward(static_cast<const float*>(weights));
  } else if (u == head_unit()) {
    SHARDRL_CHECK(!options_.shape.tie_embeddings || tied_embedding, "tied head needs the embedding weights");
    half ? head_forward(static_cast<const bf16*>(weights), static_cast<const bf16*>(tied_embedding))
         : head_forward(static_cast<const float*>(weights), static_cast<const float*>(tied_embedding));
  } else {
    half ? layer_forward(u - 1, static_cast<const bf16*>(weights), false)
         : layer_forward(u - 1, static_cast<const float*>(weights), false);
  }
}

const std::int32_t* Transformer::batch_tokens() const { return act_->tokens.data(); }

void* Transformer::embedded() {
  return options_.precision == Precision::bf16 ? static_cast<void*>(residual<bf16>(0)) : residual<float>(0);
}

void Transformer::forward_embedded() {
  SHARDRL_CHECK(B_ > 0, "forward before set_batch");
  form_rotations();
}

void Transformer::embedding_backward_rows(std::int32_t* ids, float* rows) {
  SHARDRL_CHECK(!options_.inference_only, "backward on a model built for generation only");
  options_.precision == Precision::bf16 ? embed_backward_rows<bf16>(ids, rows) : embed_backward_rows<float>(ids, rows);
}

void Transformer::backward_unit(int u, const void* weights, float* grads, const void* tied_embedding,
                                float* tied_embedding_grads) {
  SHARDRL_CHECK(!options_.inference_only, "backward on a model built for generation only");
  const bool half = options_.precision == Precision::bf16;
  if (u == 0) {
    half ? embed_backward<bf16>(grads) : embed_backward<float>(grads);
  } else if (u == head_unit()) {
    SHARDRL_CHECK(!options_.shape.tie_embeddings || (tied_embedding && tied_embedding_grads),
                  "tied head needs the embedding weights and gradient");
    half ? head_backward(static_cast<const bf16*>(weights), grads, static_cast<const bf16*>(tied_embedding),
                         tied_embedding_grads)
         : head_backward(static_cast<const float*>(weights), grads, static_cast<const float*>(tied_embedding),
                         tied_embedding_grads);
  } else {
    half ? layer_backward(u - 1, static_cast<const bf16*>(weights), grads)
         : layer_backward(u - 1, static_cast<const float*>(weights), grads);
  }
}

}  // namespace shardrl
