#include "model/gemm_attention.hpp"

#include <cmath>

#include "kernels/attention_softmax.hpp"

namespace shardrl {

AttentionWorkspaceSizes attention_workspace_bytes(const kernels::AttentionShape& s, std::size_t compute_type_size,
                                                  bool backward) {
  const std::size_t block = static_cast<std::size_t>(s.n_heads / s.n_kv_heads) * s.S * s.S;
  AttentionWorkspaceSizes w;
  w.scores = block * sizeof(float);
  w.probs = block * compute_type_size;
  if (backward) w.dkv = static_cast<std::size_t>(s.n_heads / s.n_kv_heads) * s.S * s.hd * sizeof(float);
  return w;
}

void reserve_attention_gemms(Gemm& gemm, const kernels::AttentionShape& s) {
  // Scores (S, S, hd) and the products with probabilities (S, hd, S) widen the same amount.
  gemm.reserve(s.S, s.S, s.hd);
}

namespace {

// Where block (b, g) starts in the token-major tensors: its query heads side by side in q, out,
// dout, dq (row stride H * hd), its key/value head in k, v (row stride G * hd).
struct Block {
  int S, H, G, hd, group;
  long SS;
  float scale;
  explicit Block(const kernels::AttentionShape& s)
      : S(s.S), H(s.n_heads), G(s.n_kv_heads), hd(s.hd), group(s.n_heads / s.n_kv_heads),
        SS(static_cast<long>(s.S) * s.S), scale(1.0f / std::sqrt(static_cast<float>(s.hd))) {}
  long q(int b, int g) const { return (static_cast<long>(b) * S * H + static_cast<long>(g) * group) * hd; }
  long kv(int b, int g) const { return (static_cast<long>(b) * S * G + g) * hd; }
};

}  // namespace

template <class T>
void gemm_attention_forward(const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& s,
                       const std::int32_t* positions, const T* q, const T* k, const T* v, T* out, float* lse,
                       const AttentionWorkspace& ws) {
  kernels::detail::attention_check_shape(s, positions);
  const Block x(s);
  const int S = x.S, H = x.H, G = x.G, hd = x.hd, group = x.group;
  T* probs = static_cast<T*>(ws.probs);
  for (int b = 0; b < s.B; ++b)
    for (int g = 0; g < G; ++g) {
      // scores_r = Q_r K^T for each query head r of the group (K shared: stride 0)
      gemm.gemm_strided_batched(Op::N, Op::T, S, S, hd, 1.0f, q + x.q(b, g), H * hd, hd, k + x.kv(b, g), G * hd, 0,
                                0.0f, ws.scores, S, x.SS, group);
      kernels::attention_softmax_forward(space, kernels::AttentionBlock{S, H, group, b, g}, positions, x.scale,
                                         ws.scores, probs, lse);
      // out_r = P_r V, written into head r's columns
      gemm.gemm_strided_batched(Op::N, Op::N, S, hd, S, 1.0f, probs, S, x.SS, v + x.kv(b, g), G * hd, 0, 0.0f,
                                out + x.q(b, g), H * hd, hd, group);
    }
}

template <class T>
void gemm_attention_backward(const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& s,
                        const std::int32_t* positions, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const T* dout, T* dq, T* dk, T* dv, const AttentionWorkspace& ws) {
  kernels::detail::attention_check_shape(s, positions);
  const Block x(s);
  const int S = x.S, H = x.H, G = x.G, hd = x.hd, group = x.group;
  const long SS = x.SS;
  T* probs = static_cast<T*>(ws.probs);
  for (int b = 0; b < s.B; ++b)
    for (int g = 0; g < G; ++g) {
      const long qoff = x.q(b, g);
      const T* kg = k + x.kv(b, g);
      const T* vg = v + x.kv(b, g);
      const kernels::AttentionBlock blk{S, H, group, b, g};
      gemm.gemm_strided_batched(Op::N, Op::T, S, S, hd, 1.0f, q + qoff, H * hd, hd, kg, G * hd, 0, 0.0f, ws.scores,
                                S, SS, group);
      kernels::attention_softmax_recompute(space, blk, positions, x.scale, ws.scores, lse, probs);
      // dV_g = sum over the group's heads of P_r^T dO_r: the products side by side in fp32, then
      // summed over r in a fixed order
      gemm.gemm_strided_batched(Op::T, Op::N, S, hd, S, 1.0f, probs, S, SS, dout + qoff, H * hd, hd, 0.0f, ws.dv, hd,
                                static_cast<long>(S) * hd, group);
      kernels::attention_sum_group(space, blk, G, hd, ws.dv, dv);
      // dP_r = dO_r V^T (over the scores, which are no longer needed), then dS over P
      gemm.gemm_strided_batched(Op::N, Op::T, S, S, hd, 1.0f, dout + qoff, H * hd, hd, vg, G * hd, 0, 0.0f,
                                ws.scores, S, SS, group);
      kernels::attention_softmax_backward(space, blk, hd, positions, out, dout, ws.scores, probs);
      // dQ_r = scale * dS_r K;  dK_g = scale * sum_r dS_r^T Q_r (fp32, summed like dV)
      gemm.gemm_strided_batched(Op::N, Op::N, S, hd, S, x.scale, probs, S, SS, kg, G * hd, 0, 0.0f, dq + qoff,
                                H * hd, hd, group);
      gemm.gemm_strided_batched(Op::T, Op::N, S, hd, S, x.scale, probs, S, SS, q + qoff, H * hd, hd, 0.0f, ws.dk, hd,
                                static_cast<long>(S) * hd, group);
      kernels::attention_sum_group(space, blk, G, hd, ws.dk, dk);
    }
}

template void gemm_attention_forward<float>(const ExecSpace&, Gemm&, const kernels::AttentionShape&, const std::int32_t*,
                                       const float*, const float*, const float*, float*, float*,
                                       const AttentionWorkspace&);
template void gemm_attention_forward<bf16>(const ExecSpace&, Gemm&, const kernels::AttentionShape&, const std::int32_t*,
                                      const bf16*, const bf16*, const bf16*, bf16*, float*, const AttentionWorkspace&);
template void gemm_attention_backward<float>(const ExecSpace&, Gemm&, const kernels::AttentionShape&, const std::int32_t*,
                                        const float*, const float*, const float*, const float*, const float*,
                                        const float*, float*, float*, float*, const AttentionWorkspace&);
template void gemm_attention_backward<bf16>(const ExecSpace&, Gemm&, const kernels::AttentionShape&, const std::int32_t*,
                                       const bf16*, const bf16*, const bf16*, const bf16*, const float*, const bf16*,
                                       bf16*, bf16*, bf16*, const AttentionWorkspace&);

}  // namespace shardrl
