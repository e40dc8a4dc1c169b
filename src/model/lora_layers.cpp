// LoRA's part of a decoder layer (model/lora_shape.hpp): y = x W^T + scale (x A^T) B^T on the
// targeted linear layers, by four small GEMMs forward and backward around the base's. The
// forward keeps ts = scale x A^T (N x rank per target: a few MiB per layer at rank 16) so that
// backward need not form it again; the scale is folded into ts (forward) and dt (backward), so
// each product runs once with its alpha and no separate scaling pass.
#include "core/error.hpp"
#include "model/activations.hpp"

namespace shardrl {

template <class T>
T* Transformer::lora_product(int layer, LoraTarget t) const {
  const int set = act_->layers.size() == 1 ? 0 : layer;   // one shared set: recompute, inference
  return act_->layers[set].lora.as<T>() + static_cast<long>(t) * B_ * S_ * options_.shape.lora.rank;
}

template <class T>
void Transformer::lora_forward(int layer, LoraTarget t, const T* w, const T* x, int in, T* y, int out) {
  const LayerOffsets& o = act_->offsets[layer];
  const int ti = static_cast<int>(t);
  if (o.lora_a[ti] < 0 || !adapters_on_) return;
  const int N = B_ * S_, r = options_.shape.lora.rank;
  T* ts = lora_product<T>(layer, t);
  Gemm& mm = *gemm_;
  mm.gemm(Op::N, Op::T, N, r, in, options_.shape.lora.scale(), x, in, w + o.lora_a[ti], in, 0.0f, ts, r);
  mm.gemm(Op::N, Op::T, N, out, r, 1.0f, ts, r, w + o.lora_b[ti], r, 1.0f, y, out);
}

template <class T>
void Transformer::lora_backward_input(int layer, LoraTarget t, const T* w, float* g, const T* dy, int out, T* dx,
                                      int in) {
  const LayerOffsets& o = act_->offsets[layer];
  const int ti = static_cast<int>(t);
  if (o.lora_a[ti] < 0) return;
  SHARDRL_CHECK(adapters_on_, "a backward pass through a LoRA model with its adapters off (the reference is forward-only)");
  const int N = B_ * S_, r = options_.shape.lora.rank;
  const T* ts = lora_product<T>(layer, t);
  T* dt = act_->lora_dt.as<T>();
  Gemm& mm = *gemm_;
  weight_grad(dy, ts, g + o.lora_b[ti], out, r);
  mm.gemm(Op::N, Op::N, N, r, out, options_.shape.lora.scale(), dy, out, w + o.lora_b[ti], r, 0.0f, dt, r);
  mm.gemm(Op::N, Op::N, N, in, r, 1.0f, dt, r, w + o.lora_a[ti], in, 1.0f, dx, in);
}

template <class T>
void Transformer::lora_backward_weight(int layer, LoraTarget t, float* g, const T* x, int in) {
  const LayerOffsets& o = act_->offsets[layer];
  const int ti = static_cast<int>(t);
  if (o.lora_a[ti] < 0) return;
  weight_grad(act_->lora_dt.as<T>(), x, g + o.lora_a[ti], options_.shape.lora.rank, in);
}

template <class T>
void Transformer::fold_layer_adapters(int layer, T* w, Gemm& mm) {
  const LayerOffsets& o = act_->offsets[layer];
  const ModelShape& s = options_.shape;
  const int D = s.d_model, Hq = s.n_heads * s.head_dim, Hkv = s.n_kv_heads * s.head_dim, F = s.d_ff;
  // By LoraTarget: the base matrix W (out, in) each adapter adds to.
  const std::int64_t base[kLoraTargets] = {o.q, o.k, o.v, o.o, o.gate, o.up, o.down};
  const int out[kLoraTargets] = {Hq, Hkv, Hkv, D, F, F, D};
  const int in[kLoraTargets] = {D, D, D, Hq, D, D, F};
  for (int t = 0; t < kLoraTargets; ++t)
    if (o.lora_a[t] >= 0)   // W (out, in) += scale B (out, r) A (r, in)
      mm.gemm(Op::N, Op::N, out[t], in[t], s.lora.rank, s.lora.scale(), w + o.lora_b[t], s.lora.rank,
                  w + o.lora_a[t], in[t], 1.0f, w + base[t], in[t]);
  if (o.expert_lora_a[0] < 0) return;
  // Every expert's gate, up and down (an expert-parallel model's offsets start at its own
  // experts; a decoder holds them all).
  const int Fe = s.d_ff_expert;
  const std::int64_t expert_base[3] = {o.expert_gate, o.expert_up, o.expert_down};
  const std::int64_t expert_stride[3] = {o.expert_stride_in, o.expert_stride_in, o.expert_stride_out};
  const int e_out[3] = {Fe, Fe, D}, e_in[3] = {D, D, Fe};
  const int experts = options_.expert_exchange ? s.n_experts / options_.expert_exchange->ranks() : s.n_experts;
  for (int e = 0; e < experts; ++e)
    for (int j = 0; j < 3; ++j)
      mm.gemm(Op::N, Op::N, e_out[j], e_in[j], s.lora.rank, s.lora.scale(),
                  w + o.expert_lora_b[j] + e * o.expert_lora_stride, s.lora.rank,
                  w + o.expert_lora_a[j] + e * o.expert_lora_stride, e_in[j], 1.0f,
                  w + expert_base[j] + e * expert_stride[j], e_in[j]);
}

void Transformer::fold_adapters(int u, void* weights, Gemm* gemm) {
  if (!options_.shape.lora.on() || u == 0 || u == head_unit()) return;
  Gemm& mm = gemm != nullptr ? *gemm : *gemm_;
  if (options_.precision == Precision::bf16) fold_layer_adapters(u - 1, static_cast<bf16*>(weights), mm);
  else fold_layer_adapters(u - 1, static_cast<float*>(weights), mm);
}

template void Transformer::lora_forward<float>(int, LoraTarget, const float*, const float*, int, float*, int);
template void Transformer::lora_forward<bf16>(int, LoraTarget, const bf16*, const bf16*, int, bf16*, int);
template void Transformer::lora_backward_input<float>(int, LoraTarget, const float*, float*, const float*, int,
                                                      float*, int);
template void Transformer::lora_backward_input<bf16>(int, LoraTarget, const bf16*, float*, const bf16*, int, bf16*,
                                                     int);
template void Transformer::lora_backward_weight<float>(int, LoraTarget, float*, const float*, int);
template void Transformer::lora_backward_weight<bf16>(int, LoraTarget, float*, const bf16*, int);

}  // namespace shardrl
