// Backward of each unit, by hand, in reverse order of forward.cpp. `dres` carries dL/d(residual
// stream) from unit to unit. Weight gradients accumulate into the unit's fp32 gradient buffer,
// through the fused (beta = 1) or unfused (separate tensor, then added) path.
#include <algorithm>

#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/rows.hpp"
#include "kernels/swiglu.hpp"
#include "model/activations.hpp"
#include "model/attention.hpp"
#include "model/moe_layers.hpp"
#include "model/weight_gradients.hpp"

namespace shardrl {

// A norm's weight gradient, or none (nullptr: the kernel forms only the input gradient) when
// LoRA freezes the base.
float* Transformer::frozen(float* g, std::int64_t offset) const { return base_frozen() ? nullptr : g + offset; }

template <class T>
void Transformer::weight_grad(const T* dY, const T* X, float* dW, int out, int in) {
  wgrad_->add(dY, X, dW, out, in, B_ * S_);
}

template <class T>
void Transformer::head_backward(const T* w, float* g, const T* tied, float* tied_g) {
  const ModelShape& s = options_.shape;
  const int N = B_ * S_, D = s.d_model, V = s.vocab_size;
  Activations& a = *act_;
  const T* lm = s.tie_embeddings ? tied : w + a.head_lm;
  float* lm_g = s.tie_embeddings ? tied_g : g + a.head_lm;
  const bool entropy = distribution_.entropy;
  // The forward's rows (forward.cpp): every token's, or the scored tokens' only, compact, whose
  // dlogp and dentropy are gathered here and whose dh is scattered back below.
  const bool compact = a.compact_head;
  const int rows = compact ? a.scored_count : N;
  const float* dlogp = a.dlogp.as<float>();
  const float* dentropy = entropy ? a.dentropy.as<float>() : nullptr;
  if (compact) {
    kernels::gather_rows(space_, dlogp, a.scored.data(), a.scored_logp.as<float>(), rows, 1);
    dlogp = a.scored_logp.as<float>();
    if (entropy) {
      kernels::gather_rows(space_, dentropy, a.scored.data(), a.scored_dentropy.as<float>(), rows, 1);
      dentropy = a.scored_dentropy.as<float>();
    }
  }
  const float* entropy_of = !entropy ? nullptr : compact ? a.scored_entropy.as<float>() : a.entropy.as<float>();
  const std::int32_t* targets = compact ? a.scored_targets.data() : a.targets.data();
  // Chunk by chunk, last first: the forward's last chunk is still in the buffer, the others are
  // recomputed. Each chunk's logits become their gradient in place, then give the chunk's dh and
  // add to the head's weight gradient.
  const int chunk = static_cast<int>(a.logits_tokens);
  for (int first = rows > 0 ? ((rows - 1) / chunk) * chunk : -1; first >= 0; first -= chunk) {
    const int n = std::min(chunk, rows - first);
    if (a.logits_first != first || a.logits_count != n) head_logits(lm, first, n);
    T* dlogits = a.logits.as<T>();
    kernels::token_logprob_backward(space_, a.logits.as<T>(), targets + first, distribution_.temperature,
                                    a.lse_tok.as<float>() + first, dlogp + first,
                                    entropy_of ? entropy_of + first : nullptr, dentropy ? dentropy + first : nullptr,
                                    dlogits, n, V);
    a.logits_count = 0;
    gemm_->gemm(Op::N, Op::N, n, D, V, 1.0f, dlogits, V, lm, D, 0.0f, a.dh.as<T>() + static_cast<long>(first) * D, D);
    if (!base_frozen()) wgrad_->add(dlogits, a.hf.as<T>() + static_cast<long>(first) * D, lm_g, V, D, n);
  }
  // Compact: the scored rows' dh go back to their positions in hf (its gathered rows are used up),
  // zero elsewhere.
  T* dh = a.dh.as<T>();
  if (compact) {
    kernels::fill(space_, a.hf.as<T>(), 0.0f, long(N) * D);
    kernels::scatter_rows(space_, dh, a.scored.data(), a.hf.as<T>(), rows, D);
    dh = a.hf.as<T>();
  }
  kernels::rmsnorm_backward(space_, residual<T>(s.n_layers), w + a.head_norm, a.rstd_f.as<float>(), dh,
                            a.dres.as<T>(), frozen(g, a.head_norm), N, D, 0.0f, a.norm_scratch.as<float>());
}

template <class T>
void Transformer::layer_backward(int layer, const T* w, float* g) {
  const ModelShape& s = options_.shape;
  const int N = B_ * S_, D = s.d_model, F = s.d_ff, hd = s.head_dim;
  const int Hq = s.n_heads * hd, Hkv = s.n_kv_heads * hd;
  const LayerOffsets& o = act_->offsets[layer];
  act_->logits_count = 0;   // the scratch below shares the logits' memory (Activations::shared)
  if (options_.activation_recompute) layer_forward(layer, w, /*recompute=*/true);
  const int set = act_->layers.size() == 1 ? 0 : layer;   // one shared set: recompute, inference
  LayerActivations& a = act_->layers[set];
  Activations& b = *act_;
  T* dres = b.dres.as<T>();
  Gemm& mm = *gemm_;
  // The norms' outputs are one layer's worth, shared (activations.hpp): this layer's come back
  // from its input and xmid, bit for bit (the same kernel on the same values), unless the
  // recompute above has just formed them.
  T* h1 = b.h1.as<T>();
  T* h2 = b.h2.as<T>();
  if (!options_.activation_recompute)
    kernels::rmsnorm_forward(space_, a.xmid.as<T>(), w + o.post_norm, h2, a.rstd2.as<float>(), N, D, s.norm_eps);

  if (s.moe_layer(layer)) {
    moe_->backward(set, o, w, g, base_frozen(), h2, dres, b.dh.as<T>(), {a.g.as<T>(), a.u.as<T>(), a.a.as<T>()},
                   {b.da.as<T>(), b.dg.as<T>(), b.du.as<T>()}, N);
  } else {
    // MLP: out = xmid + down(silu(gate(h2)) * up(h2)), h2 = norm(xmid). silu(gate) * up comes
    // back from the swiglu backward's own pass over gate and up.
    T* act = b.mlp_a.as<T>();
    mm.gemm(Op::N, Op::N, N, F, D, 1.0f, dres, D, w + o.down, F, 0.0f, b.da.as<T>(), F);
    lora_backward_input(layer, LoraTarget::down, w, g, dres, D, b.da.as<T>(), F);
    kernels::swiglu_backward(space_, a.g.as<T>(), a.u.as<T>(), b.da.as<T>(), b.dg.as<T>(), b.du.as<T>(),
                             long(N) * F, act);
    lora_backward_weight(layer, LoraTarget::down, g, act, F);
    if (!base_frozen()) weight_grad(dres, act, g + o.down, D, F);
    mm.gemm(Op::N, Op::N, N, D, F, 1.0f, b.dg.as<T>(), F, w + o.gate, D, 0.0f, b.dh.as<T>(), D);
    mm.gemm(Op::N, Op::N, N, D, F, 1.0f, b.du.as<T>(), F, w + o.up, D, 1.0f, b.dh.as<T>(), D);
    lora_backward_input(layer, LoraTarget::gate, w, g, b.dg.as<T>(), F, b.dh.as<T>(), D);
    lora_backward_weight(layer, LoraTarget::gate, g, h2, D);
    lora_backward_input(layer, LoraTarget::up, w, g, b.du.as<T>(), F, b.dh.as<T>(), D);
    lora_backward_weight(layer, LoraTarget::up, g, h2, D);
    if (!base_frozen()) {
      weight_grad(b.dg.as<T>(), h2, g + o.gate, F, D);
      weight_grad(b.du.as<T>(), h2, g + o.up, F, D);
    }
  }
  kernels::rmsnorm_backward(space_, a.xmid.as<T>(), w + o.post_norm, a.rstd2.as<float>(), b.dh.as<T>(), dres,
                            frozen(g, o.post_norm), N, D, 1.0f, b.norm_scratch.as<float>());

  // Attention: xmid = x + o_proj(attn(rope(norm(q)), rope(norm(k)), v)).
  mm.gemm(Op::N, Op::N, N, Hq, D, 1.0f, dres, D, w + o.o, Hq, 0.0f, b.dattn.as<T>(), Hq);
  lora_backward_input(layer, LoraTarget::o, w, g, dres, D, b.dattn.as<T>(), Hq);
  lora_backward_weight(layer, LoraTarget::o, g, a.attn.as<T>(), Hq);
  if (!base_frozen()) weight_grad(dres, a.attn.as<T>(), g + o.o, D, Hq);
  // Shared q and k hold what forward formed last: this layer's come back from q_raw and k_raw,
  // bit for bit (the same kernels on the same values; the rstd are rewritten with their bits).
  const Rotated<T> rot = rotated<T>(a);
  if (b.q_shared.bytes() > 0) norm_and_rotate_qk(a, w, o);
  kernels::AttentionShape shape{B_, S_, s.n_heads, s.n_kv_heads, hd};
  attention_backward(options_.attention, space_, mm, shape, b.positions.data(), rot.q, rot.k,
                     a.v.as<T>(), a.attn.as<T>(), a.lse.as<float>(), b.dattn.as<T>(), b.dq.as<T>(), b.dk.as<T>(),
                     b.dv.as<T>(), b.attention_scratch());
  kernels::rope_backward(space_, b.dq.as<T>(), b.rope.as<float>(), N, s.n_heads, hd);
  kernels::rope_backward(space_, b.dk.as<T>(), b.rope.as<float>(), N, s.n_kv_heads, hd);
  T* dq = b.dq.as<T>();
  T* dk = b.dk.as<T>();
  if (s.qk_norm) {
    kernels::rmsnorm_backward(space_, a.q_raw.as<T>(), w + o.q_norm, a.rstd_q.as<float>(), dq, b.dq_raw.as<T>(),
                              frozen(g, o.q_norm), N * s.n_heads, hd, 0.0f, b.norm_scratch.as<float>());
    kernels::rmsnorm_backward(space_, a.k_raw.as<T>(), w + o.k_norm, a.rstd_k.as<float>(), dk, b.dk_raw.as<T>(),
                              frozen(g, o.k_norm), N * s.n_kv_heads, hd, 0.0f, b.norm_scratch.as<float>());
    dq = b.dq_raw.as<T>();
    dk = b.dk_raw.as<T>();
  }
  mm.gemm(Op::N, Op::N, N, D, Hq, 1.0f, dq, Hq, w + o.q, D, 0.0f, b.dh.as<T>(), D);
  mm.gemm(Op::N, Op::N, N, D, Hkv, 1.0f, dk, Hkv, w + o.k, D, 1.0f, b.dh.as<T>(), D);
  mm.gemm(Op::N, Op::N, N, D, Hkv, 1.0f, b.dv.as<T>(), Hkv, w + o.v, D, 1.0f, b.dh.as<T>(), D);
  if (!options_.activation_recompute)
    kernels::rmsnorm_forward(space_, residual<T>(layer), w + o.input_norm, h1, a.rstd1.as<float>(), N, D, s.norm_eps);
  lora_backward_input(layer, LoraTarget::q, w, g, dq, Hq, b.dh.as<T>(), D);
  lora_backward_weight(layer, LoraTarget::q, g, h1, D);
  lora_backward_input(layer, LoraTarget::k, w, g, dk, Hkv, b.dh.as<T>(), D);
  lora_backward_weight(layer, LoraTarget::k, g, h1, D);
  lora_backward_input(layer, LoraTarget::v, w, g, b.dv.as<T>(), Hkv, b.dh.as<T>(), D);
  lora_backward_weight(layer, LoraTarget::v, g, h1, D);
  if (!base_frozen()) {
    weight_grad(dq, h1, g + o.q, Hq, D);
    weight_grad(dk, h1, g + o.k, Hkv, D);
    weight_grad(b.dv.as<T>(), h1, g + o.v, Hkv, D);
  }
  kernels::rmsnorm_backward(space_, residual<T>(layer), w + o.input_norm, a.rstd1.as<float>(),
                            b.dh.as<T>(), dres, frozen(g, o.input_norm), N, D, 1.0f, b.norm_scratch.as<float>());
}

template <class T>
void Transformer::embed_backward(float* g) {
  if (base_frozen()) return;   // LoRA: the embedding is part of the frozen base
  const int N = B_ * S_, D = options_.shape.d_model;
  const Activations& a = *act_;
  kernels::embedding_backward(space_, a.tokens.data(), a.token_order.data(), a.token_starts.data(),
                              a.token_starts.data() + N + 1, a.dres.as<T>(), g + a.embed, N, D);
}

template <class T>
void Transformer::embed_backward_rows(std::int32_t* ids, float* rows) {
  if (base_frozen()) return;
  const int N = B_ * S_, D = options_.shape.d_model;
  const Activations& a = *act_;
  kernels::embedding_backward_rows(space_, a.tokens.data(), a.token_order.data(), a.token_starts.data(),
                                   a.token_starts.data() + N + 1, a.dres.as<T>(), ids, rows, lookup_rows_capacity(),
                                   D);
}

template void Transformer::head_backward<float>(const float*, float*, const float*, float*);
template void Transformer::head_backward<bf16>(const bf16*, float*, const bf16*, float*);
template void Transformer::layer_backward<float>(int, const float*, float*);
template void Transformer::layer_backward<bf16>(int, const bf16*, float*);
template void Transformer::embed_backward<float>(float*);
template void Transformer::embed_backward<bf16>(float*);
template void Transformer::embed_backward_rows<float>(std::int32_t*, float*);
template void Transformer::embed_backward_rows<bf16>(std::int32_t*, float*);
template void Transformer::weight_grad<float>(const float*, const float*, float*, int, int);
template void Transformer::weight_grad<bf16>(const bf16*, const bf16*, float*, int, int);

}  // namespace shardrl
