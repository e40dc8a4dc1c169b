// Forward of each unit: embedding; decoder layer (RMSNorm -> q/k/v -> [q/k norm] -> RoPE ->
// causal GQA attention -> o_proj + residual -> RMSNorm -> SwiGLU MLP + residual); final norm,
// LM head and token log-probabilities. Linear layers are y = x W^T with W stored (out, in).
#include <algorithm>
#include <type_traits>

#include "kernels/attention_decode.hpp"
#include "kernels/attention_decode_heads.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/decode_gemv.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/rows.hpp"
#include "model/rope_frequencies.hpp"
#include "kernels/swiglu.hpp"
#include "core/error.hpp"
#include "model/activations.hpp"
#include "model/attention.hpp"
#include "model/moe_layers.hpp"
#include "model/tensor_parallel.hpp"

namespace shardrl {

namespace {

// An inference model's weights change only between rollouts, never within a decode step.
kernels::GemvWeights decode_weights(const ModelOptions& options) {
  return options.inference_only ? kernels::GemvWeights::fixed : kernels::GemvWeights::may_change;
}

}  // namespace

template <class T>
void Transformer::embed_forward(const T* w) {
  const ModelShape& s = options_.shape;
  const int N = B_ * S_, D = s.d_model;
  kernels::embedding_forward(space_, act_->tokens.data(), w, residual<T>(0), N, D);
  form_rotations();
}

void Transformer::form_rotations() {
  // Every forward starts at the embedding (training, prefill, decode, and inside a captured
  // graph), so the batch's rotations are formed once for all layers, forward and backward.
  const ModelShape& s = options_.shape;
  kernels::rope_table(space_, act_->positions.data(), B_ * S_, s.head_dim, rope_frequencies(s), act_->rope.as<float>());
}

template <class T>
void Transformer::norm_and_rotate_qk(LayerActivations& a, const T* w, const LayerOffsets& o) {
  const ModelShape& s = options_.shape;
  const int N = B_ * S_, hd = s.head_dim;
  const Rotated<T> rot = rotated<T>(a);
  if (s.qk_norm) {
    kernels::rmsnorm_forward(space_, a.q_raw.as<T>(), w + o.q_norm, rot.q, a.rstd_q.as<float>(), N * s.n_heads, hd,
                             s.norm_eps);
    kernels::rmsnorm_forward(space_, a.k_raw.as<T>(), w + o.k_norm, rot.k, a.rstd_k.as<float>(), N * s.n_kv_heads, hd,
                             s.norm_eps);
  }
  kernels::rope_forward(space_, rot.q, act_->rope.as<float>(), N, s.n_heads, hd);
  kernels::rope_forward(space_, rot.k, act_->rope.as<float>(), N, s.n_kv_heads, hd);
}

template <class T>
void Transformer::layer_forward(int layer, const T* w, bool recompute, KvCache* cache, bool prefill) {
  const ModelShape& s = options_.shape;
  const int N = B_ * S_, D = s.d_model, F = s.d_ff, hd = s.head_dim;
  const int Hq = s.n_heads * hd, Hkv = s.n_kv_heads * hd;
  const LayerOffsets& o = act_->offsets[layer];
  const int set = act_->layers.size() == 1 ? 0 : layer;   // one shared set: recompute, inference
  LayerActivations& a = act_->layers[set];
  T* x = residual<T>(layer);
  // In backward's recompute only the internals matter: the output goes to scratch.
  T* out = recompute ? act_->recompute_out.as<T>() : residual<T>(layer + 1);
  Gemm& mm = *gemm_;
  // In training a layer's scratch shares the logits' memory (Activations::shared): the logits
  // held are gone (an inference model's, its own buffer, are consumed before a layer runs).
  act_->logits_count = 0;

  T* h1 = act_->h1.as<T>();
  T* h2 = act_->h2.as<T>();
  const Rotated<T> rot = rotated<T>(a);   // what attention reads
  T* q = s.qk_norm ? a.q_raw.as<T>() : rot.q;
  T* k = s.qk_norm ? a.k_raw.as<T>() : rot.k;
  // A decode step's few rows go through the matrix-vector kernels where the build has them
  // (kernels/decode_gemv.hpp: each weight read once, q, k and v in one launch, the layer's norms
  // folded into the products that read them); the norms and GEMMs otherwise. `decode_gemv`
  // counts the launches it made.
  const bool decode = cache != nullptr && !prefill;
  const bool few_rows = options_.decode_gemv && decode && N <= kernels::kDecodeGemvMaxRows;
  const kernels::GemvWeights weights = decode_weights(options_);
  const auto decode_gemv = [&](int in, const T* from, std::initializer_list<kernels::GemvProduct<T>> products,
                               kernels::GemvNorm<T> norm = {}) {
    const bool ran = few_rows && kernels::decode_gemv(space_, N, in, from, products, norm, weights);
    decode_gemv_calls_ += ran;
    return ran;
  };
  // Adapters read the normalised rows (h1, h2): their layers keep the norm's own launch.
  const auto adapted = [&](std::initializer_list<LoraTarget> targets) {
    bool any = false;
    for (LoraTarget t : targets) any = any || o.lora_a[static_cast<int>(t)] >= 0;
    return adapters_on_ && any;
  };
  const std::initializer_list<kernels::GemvProduct<T>> qkv = {
      {w + o.q, q, nullptr, Hq}, {w + o.k, k, nullptr, Hkv}, {w + o.v, a.v.as<T>(), nullptr, Hkv}};
  const bool qkv_adapted = adapted({LoraTarget::q, LoraTarget::k, LoraTarget::v});
  const bool qkv_normed = !qkv_adapted && decode_gemv(D, x, qkv, {w + o.input_norm, s.norm_eps});
  // Decode steps past the matrix-vector kernels' rows run q, k and v as one GEMM, and gate and up
  // as another, into rows of (q | k | v) and (g | u) (decode_rows), where the weights lie back to
  // back in the unit: at 64 rows cuBLAS's small GEMMs were most of a step, each a launch.
  T* rows = act_->decode_rows.as<T>();
  const bool qkv_rows = decode && !few_rows && rows && !qkv_adapted && o.k == o.q + std::int64_t(Hq) * D &&
                        o.v == o.k + std::int64_t(Hkv) * D;
  if (!qkv_normed) {
    kernels::rmsnorm_forward(space_, x, w + o.input_norm, h1, a.rstd1.as<float>(), N, D, s.norm_eps);
    if (qkv_rows) {
      mm.gemm(Op::N, Op::T, N, Hq + 2 * Hkv, D, 1.0f, h1, D, w + o.q, D, 0.0f, rows, Hq + 2 * Hkv);
    } else if (!decode_gemv(D, h1, qkv)) {
      mm.gemm(Op::N, Op::T, N, Hq, D, 1.0f, h1, D, w + o.q, D, 0.0f, q, Hq);
      mm.gemm(Op::N, Op::T, N, Hkv, D, 1.0f, h1, D, w + o.k, D, 0.0f, k, Hkv);
      mm.gemm(Op::N, Op::T, N, Hkv, D, 1.0f, h1, D, w + o.v, D, 0.0f, a.v.as<T>(), Hkv);
    }
  }
  lora_forward(layer, LoraTarget::q, w, h1, D, q, Hq);
  lora_forward(layer, LoraTarget::k, w, h1, D, k, Hkv);
  lora_forward(layer, LoraTarget::v, w, h1, D, a.v.as<T>(), Hkv);
  if (!decode) norm_and_rotate_qk(a, w, o);
  if (cache && prefill) {
    // Prefill: every token's key and value go to the cache (slot = its row); the attention is
    // the ordinary causal one within the batch.
    const kernels::CacheShape cs = cache->step_shape(N);
    kernels::kv_cache_write(space_, cs, act_->slots.data(), act_->positions.data(), rot.k, a.v.as<T>(),
                            static_cast<T*>(cache->keys(layer)), static_cast<T*>(cache->values(layer)));
    // cuDNN builds a plan per shape, and prefill's shapes change with every call: the flash kernels.
    kernels::AttentionShape shape{B_, S_, s.n_heads, s.n_kv_heads, hd};
    const AttentionImpl impl = options_.attention == AttentionImpl::cudnn ? AttentionImpl::flash : options_.attention;
    attention_forward(impl, space_, mm, shape, act_->positions.data(), rot.q, rot.k, a.v.as<T>(),
                      a.attn.as<T>(), a.lse.as<float>(), act_->attention_scratch());
  } else if (cache) {
    // Generation: one token per row; its key and value join the row's cache, which it attends.
    const kernels::CacheShape cs = cache->step_shape(B_);
    T* kc = static_cast<T*>(cache->keys(layer));
    T* vc = static_cast<T*>(cache->values(layer));
    const std::int32_t* slots = act_->decode_slots ? act_->slots.data() : nullptr;
    // The heads' norms and rotations and the cache write, then the attention: one launch where
    // the build has it (kernels/attention_decode_heads.hpp).
    kernels::qk_rope_cache_attention_decode(
        space_, cs, slots, act_->positions.data(), qkv_rows ? rows : q, qkv_rows ? rows + Hq : k,
        qkv_rows ? rows + Hq + Hkv : a.v.as<T>(), s.qk_norm ? w + o.q_norm : nullptr,
        s.qk_norm ? w + o.k_norm : nullptr, s.norm_eps, act_->rope.as<float>(), rot.q, kc, vc,
        qkv_rows ? Hq + 2 * Hkv : 0, a.attn.as<T>(),
        options_.decode_attention_split ? cache->decode_split() : kernels::DecodeSplitWorkspace{},
        options_.decode_heads_in_attention);
  } else {
    kernels::AttentionShape shape{B_, S_, s.n_heads, s.n_kv_heads, hd};
    attention_forward(options_.attention, space_, mm, shape, act_->positions.data(), rot.q, rot.k,
                      a.v.as<T>(), a.attn.as<T>(), a.lse.as<float>(), act_->attention_scratch());
  }
  // xmid = x + attn Wo^T: the residual enters as C with beta = 1. Tensor-parallel, each rank's
  // product is a partial sum over its heads: the residual enters on the group's rank 0 only. A
  // decode step of an inference model updates x in place (Activations::decode_in_place): xmid is
  // x, and so is out.
  T* xmid = act_->decode_in_place ? x : a.xmid.as<T>();
  TensorParallelGroup* tp = options_.tensor_parallel;
  const bool adds_residual = !tp || tp->rank() == 0;
  const auto residual_into = [&](const T* from, T* to) {
    if (!adds_residual) kernels::fill(space_, to, 0.0f, long(N) * D);
    else kernels::cast(space_, from, to, long(N) * D);
  };
  if (!decode_gemv(Hq, a.attn.as<T>(), {{w + o.o, xmid, adds_residual ? x : nullptr, D}})) {
    residual_into(x, xmid);
    mm.gemm(Op::N, Op::T, N, D, Hq, 1.0f, a.attn.as<T>(), Hq, w + o.o, Hq, 1.0f, xmid, D);
  }
  lora_forward(layer, LoraTarget::o, w, a.attn.as<T>(), Hq, xmid, D);
  if (tp) tp->sum(xmid, long(N) * D, std::is_same_v<T, bf16>);

  const auto post_norm = [&] {
    kernels::rmsnorm_forward(space_, xmid, w + o.post_norm, h2, a.rstd2.as<float>(), N, D, s.norm_eps);
  };
  if (s.moe_layer(layer)) {
    post_norm();
    kernels::cast(space_, xmid, out, long(N) * D);
    moe_->forward(set, o, w, h2, out, {a.g.as<T>(), a.u.as<T>(), a.a.as<T>()}, N,
                  /*track_aux=*/!recompute && cache == nullptr && !options_.inference_only, adapters_on_);
    return;
  }
  T* act = act_->mlp_a.as<T>();
  // The fused (norm,) gate, up and SwiGLU never write (h2,) g and u: not where adapters read or
  // add to them. Where the kernels decline the folded norm (a row too long for their shared
  // memory), the norm runs first.
  const bool fusable = few_rows && !adapted({LoraTarget::gate, LoraTarget::up});
  bool fused_mlp = fusable && kernels::decode_gemv_swiglu(space_, N, D, xmid, w + o.gate, w + o.up, F, act,
                                                          {w + o.post_norm, s.norm_eps}, weights);
  if (!fused_mlp) {
    post_norm();
    fused_mlp = fusable && kernels::decode_gemv_swiglu(space_, N, D, h2, w + o.gate, w + o.up, F, act, {}, weights);
  }
  decode_gemv_calls_ += fused_mlp;
  const bool gate_up_rows = !fused_mlp && decode && !few_rows && rows &&
                            !adapted({LoraTarget::gate, LoraTarget::up}) && o.up == o.gate + std::int64_t(F) * D;
  if (gate_up_rows) {
    mm.gemm(Op::N, Op::T, N, 2 * F, D, 1.0f, h2, D, w + o.gate, D, 0.0f, rows, 2 * F);
    kernels::swiglu_forward_rows(space_, rows, act, N, F);
  } else if (!fused_mlp) {
    mm.gemm(Op::N, Op::T, N, F, D, 1.0f, h2, D, w + o.gate, D, 0.0f, a.g.as<T>(), F);
    mm.gemm(Op::N, Op::T, N, F, D, 1.0f, h2, D, w + o.up, D, 0.0f, a.u.as<T>(), F);
    lora_forward(layer, LoraTarget::gate, w, h2, D, a.g.as<T>(), F);
    lora_forward(layer, LoraTarget::up, w, h2, D, a.u.as<T>(), F);
    kernels::swiglu_forward(space_, a.g.as<T>(), a.u.as<T>(), act, long(N) * F);
  }
  if (!decode_gemv(F, act, {{w + o.down, out, adds_residual ? xmid : nullptr, D}})) {
    residual_into(xmid, out);
    mm.gemm(Op::N, Op::T, N, D, F, 1.0f, act, F, w + o.down, F, 1.0f, out, D);
  }
  lora_forward(layer, LoraTarget::down, w, act, F, out, D);
  if (tp) tp->sum(out, long(N) * D, std::is_same_v<T, bf16>);
}

template <class T>
void Transformer::head_forward(const T* w, const T* tied, bool target_logprobs) {
  const ModelShape& s = options_.shape;
  const int N = B_ * S_, D = s.d_model, V = s.vocab_size;
  Activations& a = *act_;
  const T* lm = s.tie_embeddings ? tied : w + a.head_lm;
  SHARDRL_CHECK(static_cast<std::size_t>(N) <= a.head_tokens, "the head's buffers hold fewer tokens than the batch");
  const auto final_norm = [&](T* out) {
    kernels::rmsnorm_forward(space_, residual<T>(s.n_layers), w + a.head_norm, out, a.rstd_f.as<float>(), N, D,
                             s.norm_eps);
  };
  if (!target_logprobs) {   // decoding: every row's logits, for the draw
    SHARDRL_CHECK(static_cast<std::size_t>(N) <= a.logits_tokens, "the logits buffer holds fewer tokens than the batch");
    // A few rows: the matrix-vector kernels (kernels/decode_gemv.hpp), the final norm folded in
    // where they take it, else run first.
    const bool few_rows = options_.decode_gemv && N <= kernels::kDecodeGemvMaxRows;
    const std::initializer_list<kernels::GemvProduct<T>> logits = {{lm, a.logits.as<T>(), nullptr, V}};
    const kernels::GemvWeights weights = decode_weights(options_);
    bool ran = few_rows && kernels::decode_gemv(space_, N, D, residual<T>(s.n_layers), logits,
                                                {w + a.head_norm, s.norm_eps}, weights);
    if (!ran) {
      final_norm(a.hf.as<T>());
      ran = few_rows && kernels::decode_gemv(space_, N, D, a.hf.as<T>(), logits, {}, weights);
    }
    decode_gemv_calls_ += ran;
    if (ran) {
      a.logits_first = 0;
      a.logits_count = N;
    } else {
      head_logits(lm, 0, N);
    }
    return;
  }
  // With unscored tokens in the batch (set_batch), the head runs on the scored ones only: their
  // normed rows gathered to the front of hf (dh, free until backward, holds all of them
  // meanwhile), their results written compact and then scattered to the batch's positions.
  const bool compact = a.compact_head;
  const int rows = compact ? a.scored_count : N;
  if (compact) {
    final_norm(a.dh.as<T>());
    kernels::gather_rows(space_, a.dh.as<T>(), a.scored.data(), a.hf.as<T>(), rows, D);
  } else {
    final_norm(a.hf.as<T>());
  }
  float* logp = compact ? a.scored_logp.as<float>() : a.logp.as<float>();
  float* entropy = !distribution_.entropy ? nullptr : compact ? a.scored_entropy.as<float>() : a.entropy.as<float>();
  const std::int32_t* targets = compact ? a.scored_targets.data() : a.targets.data();
  // Chunk by chunk: the logits of a chunk live only until its log-probabilities are taken.
  const int chunk = static_cast<int>(a.logits_tokens);
  for (int first = 0; first < rows; first += chunk) {
    const int n = std::min(chunk, rows - first);
    head_logits(lm, first, n);
    kernels::token_logprob_forward(space_, a.logits.as<T>(), targets + first, distribution_.temperature, logp + first,
                                   a.lse_tok.as<float>() + first, entropy ? entropy + first : nullptr, n, V);
  }
  head_rows_ = rows;
  if (!compact) return;
  kernels::fill(space_, a.logp.as<float>(), 0.0f, N);
  kernels::scatter_rows(space_, logp, a.scored.data(), a.logp.as<float>(), rows, 1);
  if (entropy) {
    kernels::fill(space_, a.entropy.as<float>(), 0.0f, N);
    kernels::scatter_rows(space_, entropy, a.scored.data(), a.entropy.as<float>(), rows, 1);
  }
}

template <class T>
void Transformer::head_logits(const T* lm, int first, int n) {
  const int D = options_.shape.d_model, V = options_.shape.vocab_size;
  Activations& a = *act_;
  gemm_->gemm(Op::N, Op::T, n, V, D, 1.0f, a.hf.as<T>() + static_cast<long>(first) * D, D, lm, D, 0.0f,
              a.logits.as<T>(), V);
  a.logits_first = first;
  a.logits_count = n;
}

template void Transformer::norm_and_rotate_qk<float>(LayerActivations&, const float*, const LayerOffsets&);
template void Transformer::norm_and_rotate_qk<bf16>(LayerActivations&, const bf16*, const LayerOffsets&);
template void Transformer::embed_forward<float>(const float*);
template void Transformer::embed_forward<bf16>(const bf16*);
template void Transformer::layer_forward<float>(int, const float*, bool, KvCache*, bool);
template void Transformer::layer_forward<bf16>(int, const bf16*, bool, KvCache*, bool);
template void Transformer::head_forward<float>(const float*, const float*, bool);
template void Transformer::head_forward<bf16>(const bf16*, const bf16*, bool);
template void Transformer::head_logits<float>(const float*, int, int);
template void Transformer::head_logits<bf16>(const bf16*, int, int);

}  // namespace shardrl
