#include "job/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/memory_capacity.hpp"
#include "fsdp/lookup_rows.hpp"
#include "job/options.hpp"
#include "kernels/attention_decode_cuda.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/rmsnorm.hpp"
#include "model/param_spec.hpp"
#include "model/tensor_parallel.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/layout.hpp"
#include "mpi/mpi_check.hpp"
#include "rl/sequence.hpp"

namespace shardrl {
namespace {

double sum(const std::vector<MemoryTerm>& terms) {
  double s = 0;
  for (const auto& t : terms) s += t.bytes;
  return s;
}

double gib(double bytes) { return bytes / double(1 << 30); }

// The shape's sizes as doubles (the products below overflow 64 bits for absurd keys).
struct Dims {
  double V, D, L, Hq, Hkv, layer_attention, dense_mlp, moe_router, moe_experts, shared_expert, moe_layers;
  // The MLP's hidden width of a dense layer (d_ff) and of an MoE layer's shared expert (0
  // without one), and the widest layer's.
  double dense_F, shared_F, F;
  double qk_norm;   // 1 when q and k are normalised per head (their raw projections are kept too)
};

Dims dims_of(const ModelShape& s) {
  Dims d{};
  d.V = s.vocab_size;
  d.D = s.d_model;
  d.L = s.n_layers;
  d.Hq = double(s.n_heads) * s.head_dim;
  d.Hkv = double(s.n_kv_heads) * s.head_dim;
  d.layer_attention = 2 * d.D + 2 * d.D * d.Hq + 2 * d.D * d.Hkv + (s.qk_norm ? 2.0 * s.head_dim : 0.0);
  d.dense_mlp = 3 * d.D * double(s.d_ff);
  d.moe_router = double(s.n_experts) * d.D;
  d.moe_experts = double(s.n_experts) * 3 * d.D * s.d_ff_expert;   // the routed experts, without the shared one
  d.shared_expert = s.shared_expert ? 3 * d.D * s.d_ff_expert : 0;
  d.moe_layers = s.n_experts > 0 ? std::floor(d.L / s.moe_every) : 0;
  // The dense MLP's buffers serve an MoE layer's shared expert (model/transformer.cpp).
  d.dense_F = s.d_ff;
  d.shared_F = s.shared_expert ? s.d_ff_expert : 0;
  d.F = std::max(d.moe_layers < d.L ? d.dense_F : 0.0, d.moe_layers > 0 ? d.shared_F : 0.0);
  d.qk_norm = s.qk_norm ? 1 : 0;
  return d;
}

// Activations of `tokens` tokens through `stored` layers' saved tensors (every layer's, or one
// set, with recompute or for inference), in the compute type: the residual stream of every
// layer boundary, each saved layer's q/k/v, attention output, xmid, the MLP's gate and up, and
// the shared norm outputs and MLP product.
double activation_bytes(const Dims& d, double tokens, double residuals, double stored, double es) {
  // Kept per layer: q, k, v (with q/k norms their raw projections instead of q and k), the
  // attention's output, xmid, and the MLP's gate and up as wide as the layer's (an MoE layer's
  // shared expert's, with its activation; model/transformer.cpp); one layer's worth of the
  // norms' outputs and the MLP's activation, and with q/k norms of q and k, shared
  // (model/activations.hpp).
  const double attention = d.Hq + 2 * d.Hkv + d.Hq + d.D;
  const double mlp = stored > 1 ? (d.L - d.moe_layers) * 2 * d.dense_F + d.moe_layers * 3 * d.shared_F
                                : 2 * d.F + (d.moe_layers > 0 ? d.shared_F : 0.0);
  const double shared = 2 * d.D + d.F + d.qk_norm * (d.Hq + d.Hkv);
  return tokens * (residuals * d.D + stored * attention + mlp + shared) * es;
}

// The decode attention's split workspace (its partials and counters) for steps of up to `rows`
// rows: what kernels/attention_decode_cuda.hpp sizes, none for head dims its kernel does not take.
double decode_split_bytes(const Dims& d, int head_dim, double rows, double len) {
  const kernels::DecodeSplitSizes n = kernels::attention_decode_cuda_split_sizes(
      kernels::CacheShape{int(rows), int(len), int(d.Hq / head_dim), int(d.Hkv / head_dim), head_dim});
  return double(n.partials) * 4 + double(n.arrivals) * 4;
}

// A model's GEMM workspace (docs/memory.md): cuBLAS's 32 MiB on a GPU, in its phase of the arena;
// on the CPU, bf16 GEMMs run in fp32 through a conversion workspace sized by the largest weight,
// which is at least the head's (vocab_size, d_model), and which each model holds outside the
// arena (gemm_outside_arena).
double gemm_workspace_bytes(const Dims& d, double tokens, double es, bool gpu_build) {
  if (gpu_build) return 32.0 * (1 << 20);
  return es == 2 ? (tokens * d.D + d.D * d.V + tokens * d.V) * 4 : 0;
}

// One model's attention scratch (model/transformer.cpp, docs/memory.md) for rows x S tokens:
// with batched GEMMs one (row, kv head) block of S x S fp32 scores and compute-type
// probabilities, and in training the group's fp32 key and value gradients; with the flash
// kernels nothing of S x S, only training's fp32 row sums, one per (token, query head).
// cuDNN's attention backward workspace (kernels/cudnn_attention.hpp): as many rows per call as
// fit model.cudnn_workspace_mib; where one row does not, one row and the most kv heads (a divisor
// of n_kv_heads, each with its query heads: the workspace is per query head) that fit; none (the
// flash kernels) where one kv head does not. Training only: prefill takes the flash kernels.
double cudnn_workspace_bytes(const ModelOptions& m, double rows, double S) {
  const int H = m.shape.n_heads, G = m.shape.n_kv_heads;
  const double per_row =
      kernels::cudnn_attention_workspace_per_row(kernels::AttentionShape{1, int(S), H, G, m.shape.head_dim});
  const double budget = double(m.cudnn_workspace_bytes);
  const double fit = std::floor(budget / per_row);
  if (fit >= 1) return std::min(rows, fit) * per_row;
  for (int g = G - 1; g >= 1; --g)
    if (G % g == 0 && (long(g) * (H / G) * long(S)) % 4 == 0 && per_row * g / G <= budget) return per_row * g / G;
  return 0;
}

double attention_scratch_bytes(const ModelOptions& m, double rows, double S, double es, bool training) {
  const double heads = m.shape.n_heads, hd = m.shape.head_dim;
  if (fused_attention(m.attention)) {
    if (!training) return 0;
    return rows * S * heads * 4 + (m.attention == AttentionImpl::cudnn ? cudnn_workspace_bytes(m, rows, S) : 0);
  }
  const double group = double(m.shape.n_heads / m.shape.n_kv_heads);
  return group * S * S * (4 + es) + (training ? 2 * group * S * hd * 4 : 0);
}

}  // namespace

double bytes_of(const std::vector<MemoryTerm>& terms) { return sum(terms); }
double MemoryPlan::device_bytes() const { return sum(device); }
double MemoryPlan::host_bytes() const { return sum(host); }

MemoryPlan plan_memory(const Config& config, int world_size, bool rl_loop) {
  return plan_memory(config, world_size, rl_loop, device_memory_is_separate());
}

MemoryPlan plan_memory(const Config& config, int world_size, bool rl_loop, bool gpu_build, GenerateShape generate,
                       bool trains) {
  ModelOptions m = model_options(config);
  // model_options resolves "auto" for this build. A GPU build planned on a CPU build (`plan
  // --gpu-memory` on a login node) takes cuDNN and the flash kernels where they run, planned as a
  // build configured with cuDNN, the larger of the two; a GPU build plans what it has.
  if (gpu_build && !device_memory_is_separate() && config.model.attention == AttentionChoice::automatic &&
      m.precision == Precision::bf16 && kernels::flash_attention_supports_head_dim(m.shape.head_dim))
    m.attention = AttentionImpl::cudnn;
  const Dims d = dims_of(m.shape);
  const double N = world_size;
  const double es = m.precision == Precision::bf16 ? 2 : 4;
  // A policy that is only sampled keeps its weights alone (FsdpOptions::trains).
  const double grad = !trains ? 0 : config.fsdp.main_grad_dtype == GradDtype::fp32 ? 4 : 2;
  const double state = !trains ? 0 : config.optim.state_dtype == GradDtype::fp32 ? 4 : 2;
  const double reference = trains && config.rl.kl_coef > 0 ? es : 0;
  const char* sampled_only = "(sampled only: no gradients, no Adam moments)";
  const double P = d.V * d.D * (m.shape.tie_embeddings ? 1 : 2) + d.D + d.L * d.layer_attention +
                   d.moe_layers * (d.moe_router + d.moe_experts + d.shared_expert) + (d.L - d.moe_layers) * d.dense_mlp;
  MemoryPlan plan;

  // The sharded state (docs/memory.md): fp32 main weights, their bf16 copy, gradients, Adam's
  // m and v, the reference policy's slice. With LoRA the base is its compute-type slices only
  // (and is the reference), the adapters carry the rest.
  if (m.shape.lora.on()) {
    const double A = double(m.shape.adapter_count());
    plan.device.push_back({fmt::format("frozen base (LoRA): {:.4g} parameters / {} ranks x {} bytes", P, world_size, es),
                           P / N * es});
    const double per_adapter = es + 4 + grad + 2 * state;
    plan.device.push_back(
        {fmt::format("LoRA adapters {}: {:.4g} parameters / {} ranks x {} bytes",
                     trains ? "with gradients and Adam moments" : sampled_only, A, world_size, per_adapter),
         A / N * per_adapter});
  } else {
    const double per_param = 4 + (es == 2 ? 2 : 0) + grad + 2 * state + reference;
    plan.device.push_back({fmt::format("{}: {:.4g} parameters / {} ranks x {} bytes",
                                       trains ? "weights, gradients and Adam moments"
                                              : fmt::format("weights {}", sampled_only),
                                       P, world_size, per_param),
                           P / N * per_param});
  }

  // Train phase: the largest gathered unit (two slots and its fp32 gradient), the activations of
  // a micro-batch, the logits of a chunk of it (their gradient overwrites them). With expert parallelism a rank gathers only
  // its own experts of an MoE layer.
  const double expert_share = config.fsdp.expert_parallel ? 1 / N : 1;
  const double largest_layer =
      d.layer_attention +
      std::max(d.moe_layers > 0 ? d.moe_router + d.moe_experts * expert_share + d.shared_expert : 0.0,
               d.moe_layers < d.L ? d.dense_mlp : 0.0);
  const double largest_unit = std::max(d.V * d.D, largest_layer);
  // The trainer's second gradient buffer holds the largest decoder layer (a tied head's own
  // gradient, its final norm's, is smaller); each buffer has, reduced in bf16, a bf16 copy and a
  // receive slice (1 / ranks of it), except at one rank without expert-parallel layers, where
  // the buffers receive in place.
  const double second_unit = largest_layer;
  const bool reduce_bf16 = config.fsdp.reduce_dtype == GradDtype::bf16;
  const bool receives = world_size > 1 || (config.fsdp.expert_parallel && d.moe_layers > 0);
  const double staging_per_element = (reduce_bf16 ? 2.0 : 0.0) + (receives ? (reduce_bf16 ? 2.0 : 4.0) / N : 0.0);
  const double reduce_staging = trains ? (largest_unit + second_unit) * staging_per_element : 0.0;
  const double T = double(config.train.micro_batch_size) * double(config.train.seq_len);
  // The embedding's lookup as rows (fsdp/lookup_rows.hpp), its forward's and (unless frozen,
  // with LoRA) its gradient's, in one pair of buffers: every rank's ids and fp32 rows.
  const bool as_rows = lookup_as_rows(world_size, std::int64_t(T), std::int64_t(d.V));
  const double lookup_rows = as_rows ? N * T * (d.D + 1) * 4 : 0.0;
  const double stored = config.train.activation_recompute ? 1 : d.L;
  const double logit_tokens =
      config.train.logits_chunk_tokens > 0 ? std::min(T, double(config.train.logits_chunk_tokens)) : T;
  // At one rank the gather slots are views of the slices themselves (fsdp/sharded_trainer.cpp),
  // unless debug.check_released poisons released ones or expert-parallel units gather a part.
  const bool slot_views =
      world_size == 1 && !config.debug.check_released && !(config.fsdp.expert_parallel && d.moe_layers > 0);
  // And with fp32 gradients reduced in fp32 and no adapters, backward writes the persistent
  // gradient slices themselves: no full-unit gradient buffers.
  const bool grads_in_place = world_size == 1 && !(config.fsdp.expert_parallel && d.moe_layers > 0) &&
                              config.fsdp.reduce_dtype == GradDtype::fp32 &&
                              config.fsdp.main_grad_dtype == GradDtype::fp32 && !m.shape.lora.on();
  // Where a unit's gradient has a buffer of its own (none in a policy that is only sampled).
  const bool unit_gradient = trains && !grads_in_place;
  const double grad_buffer = unit_gradient ? 4.0 : 0.0;
  // Two gather slots, or with fsdp.reshard_after_forward = false one per unit (every unit stays
  // gathered from forward to backward), each of the largest unit's size (fsdp/sharded_trainer.cpp).
  // (The embedding, the layers, the head: model/param_spec.cpp. Counted, not listed: a plan is
  // also made of shapes too large to list, to refuse them.)
  const double slots = config.fsdp.reshard_after_forward ? 2 : d.L + 2;
  const std::string slots_text = config.fsdp.reshard_after_forward
                                     ? std::string("two slots")
                                     : fmt::format("{:.4g} slots (fsdp.reshard_after_forward = false: one per unit)",
                                                   d.L + 2);
  std::vector<MemoryTerm> train{
      {fmt::format("the largest gathered unit ({:.4g} elements; the embedding is model.vocab_size x d_model): {}",
                   largest_unit,
                   !slot_views && unit_gradient ? slots_text + " and its fp32 gradient"
                   : !slot_views && trains      ? slots_text + " (its gradient is written into the slices)"
                   : !slot_views                ? slots_text
                   : unit_gradient              ? std::string("its fp32 gradient (one rank: no slots)")
                   : trains ? std::string("nothing (one rank: no slots, its gradient written into the slices)")
                            : std::string("nothing (one rank: no slots)")),
       largest_unit * ((slot_views ? 0 : slots * es) + grad_buffer)},
      {fmt::format("the second gradient buffer (the reduce-scatter of one unit overlaps the next's backward): "
                   "the largest decoder layer ({:.4g} elements) in fp32, and both buffers' reduce-scatter staging "
                   "(fsdp.reduce_dtype){}",
                   second_unit, !trains ? ": none (sampled only)"
                                : grads_in_place ? ": none at one rank with fp32 gradients" : ""),
       second_unit * grad_buffer + reduce_staging},
      {fmt::format("training activations: {:.4g} layers (model.n_layers) x train.micro_batch_size x train.seq_len = {:.4g} tokens",
                   d.L, T),
       activation_bytes(d, T, d.L + 1, stored, es)},
      // Backward's gradients of the residual and of the head's input, which the head's backward
      // writes: one layer's worth for the micro-batch.
      {fmt::format("backward scratch: the residual's gradients for {:.4g} tokens", T), T * 2 * d.D * es},
      // The norms' weight gradients sum row chunks into a fixed scratch (1 MiB), whatever the batch.
      {fmt::format("the RMSNorm weight gradients' scratch: {} floats", kernels::kRmsnormDwScratch),
       double(kernels::kRmsnormDwScratch) * 4},
      // The logits and the scratch only a layer's forward or backward uses share one buffer
      // (model/activations.hpp, Activations::shared): the larger of the two.
      {fmt::format("training logits (their gradient in place), {:.4g} tokens (train.logits_chunk_tokens, at most "
                   "the micro-batch's) x model.vocab_size {:.4g}, sharing their memory with a layer's backward "
                   "scratch (the gradients of q, k, v, their raw projections, the attention's output and the "
                   "MLP's three) and the attention scratch ({}), whichever is larger; and the GEMM workspace",
                   logit_tokens, d.V,
                   fused_attention(m.attention)
                       ? fmt::format("fused kernels: {:.4g} tokens x model.n_heads {} row sums{}", T, m.shape.n_heads,
                                     m.attention == AttentionImpl::cudnn
                                         ? ", and cuDNN's backward workspace (at most model.cudnn_workspace_mib)"
                                         : "")
                       : fmt::format("batched GEMMs: one (row, kv head) block of train.seq_len^2 = {:.4g} scores",
                                     double(config.train.seq_len) * double(config.train.seq_len))),
       std::max(logit_tokens * d.V * es,
                T * (2 * d.Hq + 2 * d.Hkv + 3 * d.F + d.qk_norm * (d.Hq + d.Hkv)) * es +
                    attention_scratch_bytes(m, double(config.train.micro_batch_size), double(config.train.seq_len),
                                            es, true)) +
           (gpu_build ? gemm_workspace_bytes(d, T, es, gpu_build) : 0)}};
  if (!config.train.gradient_accumulation_fusion) {
    // The unfused weight gradients' scratch (model/weight_gradients.hpp): the largest weight's,
    // found among the embedding, the head and the first layers (one of each kind).
    ModelShape first_layers = m.shape;
    first_layers.n_layers = std::min(first_layers.n_layers, 2 * std::max(1, first_layers.moe_every));
    double largest_param = 0;
    for (const UnitSpec& u : model_units(first_layers))
      for (const ParamSpec& p : u.params) largest_param = std::max(largest_param, double(p.numel()));
    train.push_back({fmt::format("the weight gradients' scratch (train.gradient_accumulation_fusion = false): the "
                                 "largest weight ({:.4g} elements) in fp32",
                                 largest_param),
                     largest_param * 4});
  }
  if (lookup_rows > 0)
    train.push_back({fmt::format("the embedding's lookup and gradient as rows: {:.4g} ranks' {:.4g} tokens' ids and "
                                 "rows (fewer than model.vocab_size's)",
                                 N, T),
                     lookup_rows});
  if (d.moe_layers > 0) {
    // The MoE layers' buffers (model/moe_layers.cpp), for A = T x top_k routed rows. Each stored
    // MoE layer (one with recompute) keeps its router's logits and probabilities, its routing
    // (gate, expert, order, position), its routed rows in and out, and without expert parallelism
    // the experts' products over them. Shared by the layers: the routed rows' and the router's
    // gradients, and the experts' gradient rows for R rows (with expert parallelism this rank's
    // experts may receive every rank's routed rows, and the exchange's buffers hold them); the
    // experts' adapters' scratch.
    const bool ep = config.fsdp.expert_parallel;
    const double A = T * m.shape.top_k, E = m.shape.n_experts, Fe = m.shape.d_ff_expert;
    const double R = (ep ? N : 1) * A, sets = config.train.activation_recompute ? 1 : d.moe_layers;
    const double per_set = T * E * (es + 4) + A * 4 * 4 + 2 * A * d.D * es + (ep ? 0 : 3 * A * Fe * es);
    const double lora = m.shape.lora.experts ? 2 * R * m.shape.lora.rank * es : 0;
    train.push_back({fmt::format("MoE: {:.4g} stored layer(s)' router, routing and {:.4g} routed rows (train.micro_batch_size "
                                 "x train.seq_len x model.top_k){}; the experts' gradient rows{}",
                                 sets, A, ep ? "" : " and the experts' products over them",
                                 ep ? " and the expert exchange's buffers, ranks x as many rows" : ""),
                     sets * per_set + A * d.D * es + A * 4 + T * E * es + 3 * R * Fe * es + lora +
                         (ep ? (3 * R * d.D + 3 * R * Fe) * es + 2 * R * 4 : 0)});
  }
  // Outside the arena: the batch's ids (tokens, targets, positions, cache slots) and the loop's
  // staging of the micro-batch.
  plan.device.push_back({fmt::format("the micro-batch's ids and staging: {:.4g} tokens", T),
                         T * 4 * 4 + (rl_loop ? T * 6 * 4 : 0)});
  if (!gpu_build && es == 2)
    plan.device.push_back({fmt::format("the training model's bf16 GEMM conversion workspace (CPU build, outside the "
                                       "arena): the head's product, {:.4g} tokens x model.vocab_size {:.4g}",
                                       T, d.V),
                           gemm_workspace_bytes(d, T, es, gpu_build)});

  std::vector<MemoryTerm> rollout;
  const bool generating = !rl_loop && generate.rows > 0;
  if (rl_loop || generating) {
    const double K = double(config.rl.minibatches);
    const double rows = generating ? double(generate.rows)
                                   : K * std::ceil(double(config.rl.prompts_per_iteration) / K / N) *
                                         double(config.rl.samples_per_prompt);
    const double len = generating ? double(generate.len)
                                  : std::min(double(config.train.seq_len) + 1, double(m.shape.max_seq_len));
    const std::string rows_text = generating ? fmt::format("{:.4g} rows (generate --n)", rows)
                                             : fmt::format("{:.4g} rows (rl.prompts_per_iteration / ranks x "
                                                           "rl.samples_per_prompt)",
                                                           rows);
    // rollout.tensor_parallel = tp: a group decodes its ranks' rows together, each rank with its
    // part (model/tensor_parallel.hpp): 1/tp of the kv heads of tp times the rows.
    // (generate decodes the whole model on each rank.)
    const double tp = generating ? 1.0 : double(config.rollout.tensor_parallel);
    const Dims part = tp > 1 ? dims_of(tensor_parallel_shape(m.shape, static_cast<int>(tp))) : d;
    // The paged engine's pool (rollout/engine_choice.hpp, as the generator sizes it for the
    // group's rows): rollout.kv_cache_tokens positions, or by default as many as the static
    // engine's rows x positions, in whole blocks, at least two sequences' worth and a scratch
    // block (a single row's pool is about twice its sequence).
    const bool paged = config.rollout.engine == RolloutEngine::paged;
    const bool pool = paged && config.rollout.kv_cache_tokens > 0;
    const EngineOptions engine = engine_options(config);
    const double positions =
        paged ? double(paged_pool_blocks(static_cast<std::int64_t>(rows * tp), static_cast<std::int64_t>(len), engine) *
                       engine.block_positions)
              : rows * len;
    const double kv = (paged ? positions * part.Hkv : rows * len * d.Hkv) * 2 * d.L * es;
    // A rank of a group keeps 1/tp of each layer (the embedding and head whole) and gathers whole
    // layers one at a time through a staging buffer of the largest.
    const double layers = P - d.V * d.D * (m.shape.tie_embeddings ? 1 : 2) - d.D;
    // rollout.expert_parallel: the rank keeps its own experts of each MoE layer, as training does.
    const bool ep = config.rollout.expert_parallel && d.moe_layers > 0;
    // The decoder's activations hold one prefill call (rollout/generator.cpp): the rows of
    // rollout.prefill_tokens positions, by default every row (with expert parallelism 1/ranks of
    // them), and at least the decode step's one token per row.
    const double gen_rows = rows * tp;
    const double prefill_rows =
        config.rollout.prefill_tokens > 0
            ? std::clamp(std::floor(double(config.rollout.prefill_tokens) / len), 1.0, gen_rows)
            : (ep ? std::max(1.0, std::ceil(gen_rows / N)) : gen_rows);
    const double act_tokens = std::max(gen_rows, prefill_rows * len);
    const MemoryTerm weights =
        ep ? MemoryTerm{fmt::format("rollout weights: the {:.4g} parameters but the experts' and 1/{} of the "
                                    "experts' {:.4g} (rollout.expert_parallel), in the compute type",
                                    P - d.moe_layers * d.moe_experts, world_size, d.moe_layers * d.moe_experts),
                        (P - d.moe_layers * d.moe_experts * (1 - 1 / N)) * es}
        : tp > 1 ? MemoryTerm{fmt::format("rollout weights: 1/{} (rollout.tensor_parallel) of the layers' {:.4g} "
                                       "parameters, the embedding and head whole, and a staging buffer of the "
                                       "largest layer ({:.4g} elements), in the compute type",
                                       tp, layers, largest_layer),
                           ((P - layers) + layers / tp + largest_layer) * es}
              : MemoryTerm{fmt::format("rollout weights: every unit's {:.4g} parameters in the compute type", P),
                           P * es};
    rollout = {
        weights,
        {pool ? fmt::format("KV cache: rollout.kv_cache_tokens = {:.4g} positions in whole blocks of {} with a "
                            "scratch block ({:.4g} positions) x {:.4g} layers (model.n_layers)",
                            double(config.rollout.kv_cache_tokens), engine.block_positions, positions, d.L)
              : fmt::format("KV cache: {} x {:.4g} positions{} x {:.4g} layers (model.n_layers)", rows_text, len,
                            paged ? fmt::format(" ({:.4g} in the paged pool's whole blocks of {}, at least two "
                                                "sequences' worth, and its scratch block)",
                                                positions, engine.block_positions)
                                  : "",
                            d.L),
         kv},
        // A tensor-parallel group decodes all its ranks' rows, each rank with its part's shape.
        {fmt::format("rollout activations, logits, GEMM and attention workspace: a prefill call (rollout.prefill_tokens) "
                     "of {:.4g} x {:.4g} positions, logits of {:.4g} rows x model.vocab_size {:.4g}",
                     prefill_rows, len, gen_rows, d.V),
         activation_bytes(part, act_tokens, 2, 1, es) + gen_rows * d.V * es +
             // A decode step's rows of one product for q, k and v, then for gate and up; on GPU
             // builds the decode attention's split workspace (kernels/attention_decode_cuda.hpp),
             // where its kernel takes the compute type (bf16) and the head dim.
             gen_rows * std::max(part.Hq + 2 * part.Hkv, 2 * part.F) * es +
             (gpu_build && es == 2 ? decode_split_bytes(part, m.shape.head_dim,
                                                         paged ? 2 * gen_rows : gen_rows, len)
                                   : 0.0) +
             (gpu_build ? gemm_workspace_bytes(part, act_tokens, es, gpu_build) : 0) +
             attention_scratch_bytes(m, prefill_rows, len, es, false)}};
    if (d.moe_layers > 0) {
      // The decoder's MoE buffers, one layer's (model/moe_layers.cpp): the router's logits and
      // probabilities, the routing, the routed rows in and out; the experts' products over them,
      // or with expert parallelism the exchange's buffers, which hold every rank's routed rows of
      // one prefill call (rollout/generator.cpp).
      const double tokens = act_tokens, A = tokens * m.shape.top_k, E = m.shape.n_experts;
      const double Fe = m.shape.d_ff_expert;
      const double R = ep ? N * A : A;
      rollout.push_back(
          {fmt::format("rollout MoE buffers: {:.4g} routed rows (a prefill call's positions x model.top_k){}", A,
                       ep ? fmt::format(", the expert exchange's {:.4g} (ranks x as many)", R) : ""),
           tokens * E * (es + 4) + A * 4 * 4 + 2 * A * d.D * es + 3 * R * Fe * es +
               (ep ? 3 * R * d.D * es + 2 * R * 4 : 0)});
    }
    if (!gpu_build && es == 2)
      plan.device.push_back({fmt::format("the rollout model's bf16 GEMM conversion workspace (CPU build, outside the "
                                         "arena): the head's product, {:.4g} tokens x model.vocab_size {:.4g}",
                                         act_tokens, d.V),
                             gemm_workspace_bytes(part, act_tokens, es, gpu_build)});
    plan.device.push_back({fmt::format("the rollout's ids: a prefill call's {:.4g} positions", act_tokens),
                           act_tokens * 4 * 4});
    // Host: the rollout's sequences with their log-probabilities; the warm-up's demonstrations
    // (a training job's: a policy that is only sampled holds neither).
    if (rl_loop && trains)
      plan.host.push_back({fmt::format("the rollout batch: {:.4g} rows x {:.4g} positions", rows, len),
                           rows * (sizeof(Sequence) + len * 4 + double(config.rollout.max_new_tokens) * 4)});
    const double demos = std::ceil(double(config.rl.sft_batch_size) / N);
    if (rl_loop && trains && config.rl.sft_steps > 0)
      // Each keeps its ids on the heap: at least a prompt token and EOS, in malloc's smallest
      // chunk (32 bytes on 64-bit glibc).
      plan.host.push_back({fmt::format("the warm-up batch: rl.sft_batch_size / ranks = {:.4g} demonstrations", demos),
                           demos * (sizeof(Sequence) + 32)});
  }
  if (config.checkpoint.async && trains) {
    // The snapshot an asynchronous save writes from: every state slice of a checkpoint in fp32
    // (a training job's; evaluate and generate save nothing).
    const bool lora = m.shape.lora.on();
    const double trained = lora ? double(m.shape.adapter_count()) : P;
    const double per = 3 * 4 + (!lora && config.rl.kl_coef > 0 ? 4 : 0);
    plan.host.push_back({fmt::format("checkpoint.async's snapshot: {:.4g} {} / {} ranks x {} bytes (fp32 weights, "
                                     "Adam moments{})",
                                     trained, lora ? "adapter parameters" : "parameters", world_size, per,
                                     per > 12 ? ", reference" : ""),
                         trained / N * per});
  }
  // One arena holds the larger phase (core/phase_arena.hpp); generate's generator lives outside
  // it, beside the train phase's buffers.
  plan.persistent = plan.device;
  plan.train = train;
  plan.rollout = rollout;
  if (generating) {
    plan.device.insert(plan.device.end(), train.begin(), train.end());
    plan.device.insert(plan.device.end(), rollout.begin(), rollout.end());
    return plan;
  }
  const std::vector<MemoryTerm>& larger = sum(train) >= sum(rollout) ? train : rollout;
  plan.device.insert(plan.device.end(), larger.begin(), larger.end());
  return plan;
}

std::string memory_plan_problem(const MemoryPlan& plan, const MemoryCapacity& capacity) {
  const double host_each = capacity.host_bytes / capacity.ranks_on_host;
  const double device_need = plan.device_bytes(), host_need = plan.host_bytes();
  std::string shortfall;
  if (capacity.device_is_host) {
    if (device_need + host_need > host_each)
      shortfall = fmt::format("at least {:.3g} GiB per rank, and {} rank(s) share this host's {:.3g} GiB available",
                              gib(device_need + host_need), capacity.ranks_on_host, gib(capacity.host_bytes));
  } else if (device_need > capacity.device_bytes) {
    shortfall = fmt::format("at least {:.3g} GiB of device memory per rank, and this rank's GPU has {:.3g} GiB free",
                            gib(device_need), gib(capacity.device_bytes));
  } else if (host_need > host_each) {
    shortfall = fmt::format("at least {:.3g} GiB of host memory per rank, and {} rank(s) share this host's {:.3g} GiB "
                            "available",
                            gib(host_need), capacity.ranks_on_host, gib(capacity.host_bytes));
  }
  if (shortfall.empty()) return "";
  std::vector<MemoryTerm> terms = plan.device;
  terms.insert(terms.end(), plan.host.begin(), plan.host.end());
  std::sort(terms.begin(), terms.end(), [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
  std::string out = fmt::format("the job does not fit in memory: its memory plan needs {}; the largest parts:", shortfall);
  for (std::size_t i = 0; i < std::min<std::size_t>(3, terms.size()); ++i)
    out += fmt::format("\n  {:.3g} GiB  {}", gib(terms[i].bytes), terms[i].what);
  out += "\n(docs/memory.md has the formulas; reduce the keys named above or use more ranks)";
  return out;
}

void check_memory_plan(const Config& config, bool rl_loop, MPI_Comm comm, GenerateShape generate, bool trains) {
  int size = 1;
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm, &size));
  MemoryCapacity capacity;
  capacity.device_is_host = !device_memory_is_separate();
  capacity.host_bytes = host_available_bytes();
  capacity.device_bytes = capacity.device_is_host ? capacity.host_bytes : device_free_bytes();
  {
    MPI_Comm node = MPI_COMM_NULL;
    SHARDRL_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MpiComm owned(node);
    SHARDRL_CHECK_MPI(MPI_Comm_size(node, &capacity.ranks_on_host));
  }
  const MemoryPlan plan = plan_memory(config, size, rl_loop, device_memory_is_separate(), generate, trains);
  agree_on_error(comm, memory_plan_problem(plan, capacity));
}

}  // namespace shardrl
