// The decoder-only transformer (Llama / Qwen3 style), computed unit by unit so that a caller
// (the unsharded trainer, the FSDP schedule, generation) decides where each unit's weights come
// from: forward_unit / backward_unit take the unit's weights as a flat buffer in the compute
// type and its fp32 gradient as a flat buffer. No autograd, no hooks: backward is written by
// hand in backward.cpp. Activations live in buffers allocated once, at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "blas/gemm.hpp"
#include "core/attention_impl.hpp"
#include "core/device_region.hpp"
#include "core/dtype.hpp"
#include "core/kokkos.hpp"
#include "core/moe_impl.hpp"
#include "core/phase_arena.hpp"
#include "model/expert_exchange.hpp"
#include "model/kv_cache.hpp"
#include "model/model_shape.hpp"
#include "model/param_spec.hpp"
#include "model/scored_tokens.hpp"
#include "model/tensor_parallel.hpp"

namespace shardrl {

struct LayerActivations;
struct LayerOffsets;
class MoeLayers;
class WeightGradients;

// How the head turns logits into the distribution a loss scores: at temperature T (logits / T),
// with or without each token's entropy.
struct TokenDistribution {
  float temperature = 1.0f;   // > 0
  bool entropy = false;
};

struct ModelOptions {
  ModelShape shape;
  Precision precision = Precision::bf16;
  bool gradient_accumulation_fusion = true;
  bool activation_recompute = false;
  // Training: the head computes the logits of at most this many tokens at once (0: the whole
  // batch), and backward recomputes them chunk by chunk when the batch is larger.
  int logits_chunk_tokens = 0;
  // Training and prefill attention; flash needs a GPU build, bf16 and head_dim 64 or 128
  // (job/options.cpp resolves model.attention into it; the constructor checks it).
  AttentionImpl attention = AttentionImpl::gemm;
  // cudnn: the most workspace its backward may take (it runs the batch's rows in calls that fit).
  std::size_t cudnn_workspace_bytes = std::size_t(1) << 30;
  int max_batch = 1;     // sequences
  int max_seq_len = 1;   // positions per sequence
  // The most tokens (B x S) of one forward, which size the activations (and, with expert
  // parallelism, the exchange's buffers: every rank's routed rows of that many tokens); at least
  // max_batch. 0: max_batch x max_seq_len. A decoder sets it to its prefill call's.
  long max_tokens = 0;
  // Generation only: no backward buffers, one layer's activations shared by all layers, two
  // residual buffers in turn, and head buffers for one token per row (the decode step's).
  bool inference_only = false;
  // Decode steps of up to kernels::kDecodeGemvMaxRows rows run their linear layers through the
  // matrix-vector kernels where the build has them (kernels/decode_gemv.hpp); off, through the
  // GEMMs (a benchmark's baseline: bench_decode --gemm-decode).
  bool decode_gemv = true;
  // Decode attention over long caches split over their positions where the build has the kernel
  // (kernels/attention_decode_cuda.hpp); off, one CTA streams a row's whole cache (a benchmark's
  // baseline: bench_decode --unsplit-attention).
  bool decode_attention_split = true;
  // A decode step's head work (norms, rotations, cache write) done by the attention's launch
  // where the build has it (kernels/attention_decode_heads.hpp); off, a launch of its own (a
  // benchmark's baseline: bench_decode --heads-apart).
  bool decode_heads_in_attention = true;
  // Where the activation buffers live: their own allocations, or a phase of a PhaseArena that
  // the other phase's buffers share.
  ArenaPlacement arena;
  // Mixture-of-experts layers: the load-balancing loss's weight and how the experts' GEMMs run.
  float aux_loss_coef = 0.0f;
  MoeImpl moe_impl = MoeImpl::grouped;
  // Expert parallelism (fsdp.expert_parallel): this rank computes its own experts for every
  // rank's tokens, moved by the exchange (the job's; it outlives the model). Null: every expert
  // here, from the gathered unit (expert-parallel decoding keeps it: rollout.expert_parallel).
  ExpertExchange* expert_exchange = nullptr;
  // Tensor-parallel decoding (rollout.tensor_parallel): the shape is one rank's part
  // (tensor_parallel_shape) and each layer's two output projections end with the group's sum.
  // Null: the whole model here.
  TensorParallelGroup* tensor_parallel = nullptr;
};

// How MoE layers issued their experts' GEMMs, counted per call: proof that moe_impl took effect.
struct MoeCallCounters {
  std::int64_t grouped = 0;   // one grouped call for all experts
  std::int64_t loop = 0;      // the experts one by one
};

// Which weight-gradient path ran, counted per GEMM: proof that the option took effect.
struct WgradCounters {
  std::int64_t fused = 0;     // beta = 1 GEMM straight into the fp32 gradient
  std::int64_t unfused = 0;   // GEMM into a separate tensor, then added
};

class Transformer {
 public:
  Transformer(const ModelOptions& options, const ExecSpace& space);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelOptions& options() const { return options_; }
  const ExecSpace& space() const { return space_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  int unit_count() const { return static_cast<int>(units_.size()); }
  int head_unit() const { return unit_count() - 1; }
  std::size_t compute_type_size() const;   // 2 (bf16) or 4 (fp32): the unit weight buffers' type
  std::size_t tokens_per_forward() const;  // options().max_tokens resolved

  // The batch: B rows of S positions; tokens and next-token targets as (B, S) host arrays.
  // A target of kUnscoredTarget marks a token whose log-probability nobody reads (a prompt's,
  // padding): its logp and entropy are 0 and its gradient is none, and in training the head
  // runs on the other tokens only (their hidden rows gathered; see score_every_token).
  // Without `positions` each row is one right-padded sequence. With them a row may pack
  // several sequences: positions[n] is token n's index in its own sequence (0 starts a new
  // one), so attention and RoPE never cross from one sequence into the next. With `row_tokens`
  // (B) row b's first row_tokens[b] tokens are the batch's and the rest padding, which MoE
  // layers leave out of their load-balancing loss (null: no padding). Copied into preallocated
  // device buffers (nothing allocated).
  void set_batch(const std::int32_t* tokens, const std::int32_t* targets, int B, int S,
                 const std::int32_t* positions = nullptr, const std::int32_t* row_tokens = nullptr);
  // The head on every token, those marked unscored included (their results as above): what a
  // captured train step needs, whose shapes cannot follow each batch's count of scored tokens.
  void score_every_token(bool every) { score_every_token_ = every; }
  // Tokens the head ran on in the last forward with target log-probabilities (a test's counter).
  int head_rows() const { return head_rows_; }
  int tokens_in_batch() const { return B_ * S_; }
  int batch_rows() const { return B_; }
  int batch_seq_len() const { return S_; }
  // The device buffers set_batch fills (tokens, targets, positions, cache slots, the embedding
  // backward's grouping), whole: what a captured step must find filled before its launch.
  std::vector<DeviceRegion> batch_inputs() const;

  // Forward of unit u with its weights (flat, compute type). The head also needs the
  // embedding unit's weights when embeddings are tied (pass them as `tied_embedding`).
  void forward_unit(int u, const void* weights, const void* tied_embedding = nullptr);
  // The embedding's forward (unit 0's) from rows looked up elsewhere (ShardedTrainer, from the
  // ranks' slices of the table, fsdp/sharded_trainer_lookup.cpp): the caller writes the batch's
  // embedded tokens into embedded() (compute type, tokens_per_forward() rows of d_model, the
  // first tokens_in_batch() used), then forward_embedded() does the rest of unit 0's forward.
  const std::int32_t* batch_tokens() const;   // device, tokens_per_forward() ids, as set_batch set them
  void* embedded();
  void forward_embedded();
  // The distribution the head's next forward and backward score targets under: logits / T,
  // and whether each token's entropy is computed (and its gradient taken). Whoever runs a
  // forward with target log-probabilities sets it first (ShardedTrainer: from the objective).
  void set_token_distribution(const TokenDistribution& d);
  const TokenDistribution& token_distribution() const { return distribution_; }
  // After the head's forward: per-token log-probabilities of the targets, (B*S) fp32, and with
  // token_distribution().entropy each token's entropy.
  const float* logp() const;
  const float* entropy() const;
  // Where the caller writes dL/dlogp (and dL/dentropy) (B*S, fp32) before the head's backward.
  float* dlogp();
  float* dentropy();

  // Backward of unit u, in reverse unit order after a full forward. Accumulates into the
  // unit's fp32 gradient `grads` (and, for a tied head, into `tied_embedding_grads`).
  void backward_unit(int u, const void* weights, float* grads, const void* tied_embedding = nullptr,
                     float* tied_embedding_grads = nullptr);
  // The embedding's backward (unit 0's) as rows instead of into a (vocab, d_model) gradient:
  // ids[k] and rows(k, :) for each distinct token of the micro-batch, sorted by id, then
  // ids[k] = -1 up to lookup_rows_capacity() entries (kernels::embedding_backward_rows). Nothing
  // for a frozen embedding (LoRA).
  void embedding_backward_rows(std::int32_t* ids, float* rows);
  int lookup_rows_capacity() const { return static_cast<int>(tokens_per_forward()); }

  // Generation, one new token per row: tokens[r] at position positions[r] of the sequence in
  // cache slot slots[r] (host arrays; no slots: row r is slot r). The model must have been
  // built with max_seq_len = 1 and max_batch >= rows.
  void set_decode_step(const std::int32_t* tokens, const std::int32_t* positions, int rows,
                       const std::int32_t* slots = nullptr);
  // Forward of unit u for the decode step: layers write the new keys and values into `cache`
  // and attend over the row's cached positions 0..positions[r]; the head computes the logits
  // only (no target log-probabilities).
  void decode_unit(int u, const void* weights, KvCache& cache, const void* tied_embedding = nullptr);
  // After set_batch: row b of the batch goes to cache sequence sequences[b] in a prefill (by
  // default row b is sequence b). Host array of the batch's rows.
  void set_prefill_sequences(const std::int32_t* sequences);
  // Prefill, after set_batch (row b of the batch is cache slot b): the embedding and the layers
  // (not the head) over every position at once, writing each token's key and value into
  // `cache` at its position.
  void prefill_unit(int u, const void* weights, KvCache& cache);

  // Logits of the last head forward, (B*S, vocab) in the compute type: only when the batch's
  // logits fit one chunk (ModelOptions::logits_chunk_tokens) and no layer's forward or backward
  // has run since (backward overwrites them with their gradient; in training a layer's scratch
  // shares their memory, Activations::shared); checked.
  const void* logits() const;

  const WgradCounters& wgrad_counters() const;
  // model.attention = "cudnn": the attention calls (forward and backward) cuDNN ran; 0 without.
  long cudnn_attention_calls() const;
  // Launches of the decode step's matrix-vector kernels (kernels/decode_gemv.hpp), counted on the
  // host (a replayed decode graph adds none); 0 on builds without them.
  long decode_gemv_calls() const { return decode_gemv_calls_; }
  const MoeCallCounters& moe_calls() const;
  // The weight of this micro-batch's load-balancing loss relative to aux_loss_coef (1 by
  // default); the caller divides by the micro-batches and ranks a step averages over.
  void set_aux_loss_weight(float weight);
  // The load-balancing losses of the training forwards since the reset (not recomputations),
  // summed over MoE layers, each forward's weighted as set above (without aux_loss_coef): what
  // the metrics report. Reading synchronises with the device; 0 for a dense model.
  void reset_aux_loss();
  double aux_loss() const;
  // Weight-gradient GEMMs a replayed CUDA graph ran without this object's host code.
  void add_replayed_counts(const WgradCounters& replayed);
  // LoRA: whether forward passes add the adapters (on by default). Off, the model is its frozen
  // base: the KL reference policy, without a copy of any weight.
  void set_adapters(bool on) { adapters_on_ = on; }
  bool adapters_on() const { return adapters_on_; }
  // LoRA, for decoding: unit u's adapters folded into its base weights in place (`weights` in the
  // compute type, laid out as the unit), W += scale B A, one GEMM per target on this model's
  // stream; a model with its adapters off then decodes the adapted policy, to the rounding of
  // W + scale B A, at the base's cost (the adapter path adds ~40% to a decode step). Nothing for
  // a unit without adapters. `gemm`: whose GEMMs (and workspace) to use, when this model's
  // belong to another phase of the arena (a tensor-parallel rollout folds whole units with the
  // training model's shape and the decoder's GEMMs); null: this model's.
  void fold_adapters(int u, void* weights, Gemm* gemm = nullptr);
  Gemm& gemm() { return *gemm_; }
  std::size_t activation_bytes() const;

 private:
  struct Activations;
  template <class T> void embed_forward(const T* w);
  void form_rotations();   // the rest of unit 0's forward: the batch's RoPE table
  template <class T> void layer_forward(int layer, const T* w, bool recompute, KvCache* cache = nullptr,
                                        bool prefill = false);
  // The residual stream entering layer i (i = n_layers: entering the head).
  template <class T> T* residual(int i) const;
  // The q and k a layer's attention reads (normed and rotated): its own, or one layer's worth
  // shared by all where backward forms them again (Activations::q_shared).
  template <class T> struct Rotated { T* q; T* k; };
  template <class T> Rotated<T> rotated(const LayerActivations& a) const;
  // A layer's projected q and k into rotated(a): with q/k norms q_raw and k_raw normed (their
  // rstd kept) then rotated, else rotated in place. In forward, and again in backward where
  // they are shared.
  template <class T> void norm_and_rotate_qk(LayerActivations& a, const T* w, const LayerOffsets& o);
  // The final norm and the logits; with `target_logprobs`, each token's log-probability of its
  // target too (decoding draws from the logits and needs none).
  template <class T> void head_forward(const T* w, const T* tied, bool target_logprobs = true);
  template <class T> void head_backward(const T* w, float* g, const T* tied, float* tied_g);
  // The logits of tokens [first, first + n) into the logits buffer, from the head's norm output.
  template <class T> void head_logits(const T* lm, int first, int n);
  template <class T> void layer_backward(int layer, const T* w, float* g);
  template <class T> void embed_backward(float* g);
  template <class T> void embed_backward_rows(std::int32_t* ids, float* rows);
  // dW (out, in) += dY^T X with dY (N, out), X (N, in): fused or unfused as configured.
  template <class T> void weight_grad(const T* dY, const T* X, float* dW, int out, int in);
  // LoRA (model/lora_layers.cpp). With an adapter on target t of `layer`: y (N, out) += scale
  // (x A^T) B^T, keeping ts = scale x A^T (N, rank) for backward. No adapter: nothing.
  template <class T> void lora_forward(int layer, LoraTarget t, const T* w, const T* x, int in, T* y, int out);
  // The kept N x rank product scale x A^T of target t in `layer`'s activations.
  template <class T> T* lora_product(int layer, LoraTarget t) const;
  // Backward in two halves, so that the input gradient can be formed before x exists again (the
  // MLP's down projection): dB += dy^T ts, dt = scale dy B (kept), dx (N, in) += dt A; then
  // dA += dt^T x.
  template <class T> void lora_backward_input(int layer, LoraTarget t, const T* w, float* g, const T* dy, int out,
                                              T* dx, int in);
  template <class T> void lora_backward_weight(int layer, LoraTarget t, float* g, const T* x, int in);
  template <class T> void fold_layer_adapters(int layer, T* w, Gemm& mm);
  // With LoRA the base is frozen: no gradient for anything but the adapters.
  bool base_frozen() const { return options_.shape.lora.on(); }
  float* frozen(float* g, std::int64_t offset) const;

  ModelOptions options_;
  ExecSpace space_;
  std::vector<UnitSpec> units_;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<WeightGradients> wgrad_;
  std::unique_ptr<Activations> act_;
  std::unique_ptr<MoeLayers> moe_;   // models with MoE layers
  int B_ = 0, S_ = 0;
  TokenDistribution distribution_;
  bool adapters_on_ = true;
  long decode_gemv_calls_ = 0;
  bool score_every_token_ = false;
  int head_rows_ = 0;
};

}  // namespace shardrl
