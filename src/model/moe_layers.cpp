// The mixture-of-experts MLP of a decoder layer (Qwen3-MoE style): router -> top-k with gates
// renormalised to sum to 1 -> the routed copies of the tokens grouped by expert -> each expert's
// SwiGLU -> gated combine into the residual, plus an optional shared expert on every token.
// The experts' matrices are read from the layer's one unit buffer (the gathered FSDP unit): the
// grouped and the per-expert path differ only in how the GEMMs are issued.
//
// The routing is copied to the host once per layer and forward: the experts' row counts size
// their GEMMs (so an MoE step is not capturable as a CUDA graph; the config refuses both).
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "core/error.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/moe_router.hpp"
#include "kernels/swiglu.hpp"
#include "model/moe_layers.hpp"

namespace shardrl {
namespace {

using HostInts = Kokkos::View<std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using DeviceInts = Kokkos::View<std::int32_t*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

}  // namespace

MoeLayers::MoeLayers(const ModelOptions& options, const ExecSpace& space, Gemm& gemm, WeightGradients& wgrad,
                     std::size_t tokens, int sets, bool training, BufferMaker& make)
    : options_(options), space_(space), gemm_(gemm), wgrad_(wgrad) {
  const ModelShape& s = options_.shape;
  const std::size_t N = tokens, D = s.d_model, E = s.n_experts, K = s.top_k, Fe = s.d_ff_expert, A = N * K;
  const std::size_t es = options_.precision == Precision::bf16 ? sizeof(bf16) : sizeof(float), f4 = sizeof(float);
  const std::size_t i4 = sizeof(std::int32_t);
  // With expert parallelism this rank's experts may receive every rank's routed rows.
  ExpertExchange* const ep = options_.expert_exchange;
  const std::size_t W = ep ? static_cast<std::size_t>(ep->ranks()) : 1, R = W * A;
  SHARDRL_CHECK(!ep || E % W == 0, "expert parallelism: the experts must divide among the ranks");
  sets_.resize(static_cast<std::size_t>(sets));
  for (int l = 0; l < sets; ++l) {
    if (sets > 1 && !s.moe_layer(l)) continue;   // a dense layer's set
    LayerBuffers& m = sets_[static_cast<std::size_t>(l)];
    m.router_logits = make("router_logits", N * E * es);
    m.probs = make("router_probs", N * E * f4);
    m.gate = make("router_gate", A * f4);
    m.expert = make("router_expert", A * i4);
    m.order = make("moe_order", A * i4);
    m.pos = make("moe_pos", A * i4);
    m.xp = make("moe_xp", A * D * es);
    if (!ep) {   // with expert parallelism the experts' products live in the exchange buffers
      m.eg = make("moe_g", A * Fe * es);
      m.eu = make("moe_u", A * Fe * es);
      m.ea = make("moe_a", A * Fe * es);
    }
    m.yp = make("moe_y", A * D * es);
    m.offsets.assign(E + 1, 0);
  }
  if (training) {
    dyp_ = make("moe_dyp", A * D * es);   // also the permuted input's gradient
    dgate_ = make("moe_dgate", A * f4);
    dea_ = make("moe_da", R * Fe * es);
    deg_ = make("moe_dg", R * Fe * es);
    deu_ = make("moe_du", R * Fe * es);
    drouter_ = make("moe_drouter", N * E * es);
  }
  if (s.lora.experts) {   // forward and backward scratch of the experts' adapters
    lora_t_ = make("moe_lora_t", R * std::size_t(s.lora.rank) * es);
    if (training) lora_dt_ = make("moe_lora_dt", R * std::size_t(s.lora.rank) * es);
  }
  counts_ = make("moe_counts", (E + 1) * i4);
  counted_ = make.ids("moe_counted", N);
  counted_h_.resize(N);
  aux_ = make.kept("moe_aux", 2 * f4);
  expert_h_.resize(A);
  order_h_.resize(A);
  pos_h_.resize(A);
  if (ep) {
    ExchangeBuffers& x = ep_;
    x.rows_a = make("moe_ep_rows_a", R * D * es);
    x.rows_b = make("moe_ep_rows_b", R * D * es);
    x.xl = make("moe_ep_xl", R * D * es);
    x.eg = make("moe_ep_g", R * Fe * es);
    x.eu = make("moe_ep_u", R * Fe * es);
    x.ea = make("moe_ep_a", R * Fe * es);
    x.to_local = make("moe_ep_to_local", R * i4);
    x.to_source = make("moe_ep_to_source", R * i4);
    for (auto* v : {&x.send_rows, &x.send_first, &x.recv_rows, &x.recv_first}) v->assign(W, 0);
    x.local_offsets.assign(E / W + 1, 0);
    x.send_counts.resize(E);
    x.recv_counts.resize(E);
    x.to_local_h.resize(R);
    x.to_source_h.resize(R);
  }
}

template <class TA, class TC>
void MoeLayers::expert_products(Op opA, Op opB, RowsAre rows_are, int a, int b, ExpertOperand<const TA> A,
                                  ExpertOperand<const TA> B, float beta, ExpertOperand<TC> C,
                                  const std::vector<std::int32_t>& offsets, float alpha) {
  const int E = static_cast<int>(offsets.size()) - 1;   // all experts, or this rank's
  std::vector<int> m(E), n(E), k(E);
  std::vector<const TA*> ap(E), bp(E);
  std::vector<TC*> cp(E);
  for (int e = 0; e < E; ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    const long first = offsets[e];
    m[e] = rows_are == RowsAre::m ? rows : a;
    n[e] = rows_are == RowsAre::m ? a : b;
    k[e] = rows_are == RowsAre::m ? b : rows;
    ap[e] = A.base + e * A.per_expert + first * A.per_row;
    bp[e] = B.base + e * B.per_expert + first * B.per_row;
    cp[e] = C.base + e * C.per_expert + first * C.per_row;
  }
  if (options_.moe_impl == MoeImpl::grouped) {
    gemm_.gemm_grouped(opA, opB, m, n, k, alpha, ap, A.ld, bp, B.ld, beta, cp, C.ld);
    ++calls_.grouped;
  } else {
    for (int e = 0; e < E; ++e)
      if (m[e] > 0 && n[e] > 0)
        gemm_.gemm(opA, opB, m[e], n[e], k[e], alpha, ap[e], A.ld, bp[e], B.ld, beta, cp[e], C.ld);
    ++calls_.loop;
  }
}

// Expert parallelism: the routed rows xp (grouped by expert, so by the experts' ranks) go to
// their experts' ranks; this rank receives every rank's rows for its experts (by source rank)
// and puts them local expert by local expert into the scratch's xl. The counts, offsets and both
// permutations stay in the scratch for the way back. Backward calls it again for its layer (the
// same xp and routing give the same exchange), so no layer keeps rows of the received size.
template <class T>
void MoeLayers::dispatch_to_experts(const LayerBuffers& m) {
  ExpertExchange& ex = *options_.expert_exchange;
  ExchangeBuffers& x = ep_;
  const int W = ex.ranks(), E = options_.shape.n_experts, El = E / W, D = options_.shape.d_model;
  for (int e = 0; e < E; ++e) x.send_counts[e] = m.offsets[e + 1] - m.offsets[e];
  ex.exchange_counts(x.send_counts.data(), x.recv_counts.data(), El);
  std::size_t received = 0;
  std::fill(x.local_offsets.begin(), x.local_offsets.end(), 0);
  for (int q = 0; q < W; ++q) {
    x.send_first[q] = static_cast<std::size_t>(m.offsets[q * El]);
    x.send_rows[q] = static_cast<std::size_t>(m.offsets[(q + 1) * El] - m.offsets[q * El]);
    x.recv_first[q] = received;
    x.recv_rows[q] = 0;
    for (int j = 0; j < El; ++j) {
      x.recv_rows[q] += static_cast<std::size_t>(x.recv_counts[q * El + j]);
      x.local_offsets[j + 1] += x.recv_counts[q * El + j];
    }
    received += x.recv_rows[q];
  }
  for (int j = 0; j < El; ++j) x.local_offsets[j + 1] += x.local_offsets[j];
  // Row i of the arrival order (source s, local expert j, in order) <-> row p of the local order.
  std::vector<std::int32_t> cursor(x.local_offsets.begin(), x.local_offsets.end() - 1);
  std::int32_t i = 0;
  for (int s = 0; s < W; ++s)
    for (int j = 0; j < El; ++j)
      for (std::int32_t c = 0; c < x.recv_counts[s * El + j]; ++c, ++i) {
        x.to_local_h[static_cast<std::size_t>(cursor[j])] = i;
        x.to_source_h[static_cast<std::size_t>(i)] = cursor[j]++;
      }
  Kokkos::deep_copy(space_, DeviceInts(x.to_local.as<std::int32_t>(), received), HostInts(x.to_local_h.data(), received));
  Kokkos::deep_copy(space_, DeviceInts(x.to_source.as<std::int32_t>(), received),
                    HostInts(x.to_source_h.data(), received));
  ex.exchange_rows(m.xp.as<T>(), x.send_rows.data(), x.send_first.data(), x.rows_a.as<T>(), x.recv_rows.data(),
                   x.recv_first.data(), D, std::is_same_v<T, bf16>);
  kernels::moe_permute(space_, static_cast<int>(received), 1, D, x.to_local.as<std::int32_t>(), x.rows_a.as<T>(),
                       x.xl.as<T>());
  space_.fence();   // the host permutations are rewritten by the next dispatch
}

// Rows in the local order (the experts' outputs, or in backward their inputs' gradients) back to
// the ranks they came from, landing in `out` in that rank's routed order (xp's).
template <class T>
void MoeLayers::return_from_experts(const T* local_rows, T* out) {
  ExchangeBuffers& x = ep_;
  const int D = options_.shape.d_model;
  T* arrival = local_rows == x.rows_a.as<T>() ? x.rows_b.as<T>() : x.rows_a.as<T>();
  kernels::moe_permute(space_, x.local_offsets.back(), 1, D, x.to_source.as<std::int32_t>(), local_rows, arrival);
  options_.expert_exchange->exchange_rows(arrival, x.recv_rows.data(), x.recv_first.data(), out, x.send_rows.data(),
                                          x.send_first.data(), D, std::is_same_v<T, bf16>);
}

// Backward: the gradients of this rank's routed outputs (dyp, xp's order) to the experts' ranks;
// returns the gradients of this rank's experts' outputs in the local order (rows_b).
template <class T>
const T* MoeLayers::gradients_to_experts(const T* dyp) {
  ExchangeBuffers& x = ep_;
  const int D = options_.shape.d_model;
  options_.expert_exchange->exchange_rows(dyp, x.send_rows.data(), x.send_first.data(), x.rows_a.as<T>(),
                                          x.recv_rows.data(), x.recv_first.data(), D, std::is_same_v<T, bf16>);
  kernels::moe_permute(space_, x.local_offsets.back(), 1, D, x.to_local.as<std::int32_t>(), x.rows_a.as<T>(),
                       x.rows_b.as<T>());
  return x.rows_b.as<T>();
}

// The experts' hidden products over their rows: g = x Wg^T, u = x Wu^T, a = swiglu(g, u).
template <class T>
void MoeLayers::expert_hidden(const T* w, const LayerOffsets& o, const T* x_rows,
                                const std::vector<std::int32_t>& offsets, T* eg, T* eu, T* ea, bool adapters) {
  const int D = options_.shape.d_model, Fe = options_.shape.d_ff_expert;
  const auto rows_x = routed_rows<const T>(x_rows, D);
  expert_products<T, T>(Op::N, Op::T, RowsAre::m, Fe, D, rows_x, expert_weights(w + o.expert_gate, o.expert_stride_in, D),
                        0.0f, routed_rows(eg, Fe), offsets);
  expert_products<T, T>(Op::N, Op::T, RowsAre::m, Fe, D, rows_x, expert_weights(w + o.expert_up, o.expert_stride_in, D),
                        0.0f, routed_rows(eu, Fe), offsets);
  if (adapters && o.expert_lora_a[0] >= 0) {
    expert_adapter_forward(w, o, 0, x_rows, D, eg, Fe, offsets);
    expert_adapter_forward(w, o, 1, x_rows, D, eu, Fe, offsets);
  }
  kernels::swiglu_forward(space_, eg, eu, ea, long(offsets.back()) * Fe);
}

template <class T>
void MoeLayers::expert_adapter_forward(const T* w, const LayerOffsets& o, int j, const T* x_rows, int in, T* y_rows,
                                         int out, const std::vector<std::int32_t>& offsets) {
  const int r = options_.shape.lora.rank;
  T* t = lora_t_.as<T>();
  expert_products<T, T>(Op::N, Op::T, RowsAre::m, r, in, routed_rows(x_rows, in),
                        expert_weights(w + o.expert_lora_a[j], o.expert_lora_stride, in), 0.0f, routed_rows(t, r),
                        offsets, options_.shape.lora.scale());
  expert_products<T, T>(Op::N, Op::T, RowsAre::m, out, r, routed_rows<const T>(t, r),
                        expert_weights(w + o.expert_lora_b[j], o.expert_lora_stride, r), 1.0f, routed_rows(y_rows, out),
                        offsets);
}

template <class T>
void MoeLayers::expert_adapter_backward(const T* w, const LayerOffsets& o, int j, float* g, const T* x_rows, int in,
                                          const T* dy_rows, int out, T* dx_rows,
                                          const std::vector<std::int32_t>& offsets) {
  const int r = options_.shape.lora.rank;
  const float scale = options_.shape.lora.scale();
  T* t = lora_t_.as<T>();
  T* dt = lora_dt_.as<T>();
  // t = scale x A^T again (cheaper than keeping it per layer), dt = scale dy B.
  expert_products<T, T>(Op::N, Op::T, RowsAre::m, r, in, routed_rows(x_rows, in),
                        expert_weights(w + o.expert_lora_a[j], o.expert_lora_stride, in), 0.0f, routed_rows(t, r),
                        offsets, scale);
  expert_products<T, T>(Op::N, Op::N, RowsAre::m, r, out, routed_rows(dy_rows, out),
                        expert_weights(w + o.expert_lora_b[j], o.expert_lora_stride, r), 0.0f, routed_rows(dt, r),
                        offsets, scale);
  expert_products<T, T>(Op::N, Op::N, RowsAre::m, in, r, routed_rows<const T>(dt, r),
                        expert_weights(w + o.expert_lora_a[j], o.expert_lora_stride, in), 1.0f,
                        routed_rows(dx_rows, in), offsets);
  expert_weight_grads<T>(dy_rows, out, t, r, g, o.expert_lora_b[j], o.expert_lora_stride, out, r, offsets);
  expert_weight_grads<T>(dt, r, x_rows, in, g, o.expert_lora_a[j], o.expert_lora_stride, r, in, offsets);
}

template <class T>
void MoeLayers::forward(int set, const LayerOffsets& o, const T* w, const T* h2, T* out, const SharedExpert& shared,
                        int N, bool track_aux, bool adapters) {
  const ModelShape& s = options_.shape;
  const int D = s.d_model, E = s.n_experts, k = s.top_k, Fe = s.d_ff_expert;
  LayerBuffers& m = sets_[static_cast<std::size_t>(set)];
  Gemm& mm = gemm_;
  const long A = static_cast<long>(N) * k;

  mm.gemm(Op::N, Op::T, N, E, D, 1.0f, h2, D, w + o.router, D, 0.0f, m.router_logits.as<T>(), E);
  const kernels::RouterShape rs{N, E, k};
  kernels::router_forward(space_, rs, true, m.router_logits.as<T>(), m.probs.as<float>(), m.expert.as<std::int32_t>(),
                          m.gate.as<float>());
  Kokkos::deep_copy(space_, HostInts(expert_h_.data(), A), DeviceInts(m.expert.as<std::int32_t>(), A));
  space_.fence();
  kernels::build_expert_permutation(expert_h_.data(), N, k, E, order_h_.data(), pos_h_.data(),
                                    m.offsets.data());
  Kokkos::deep_copy(space_, DeviceInts(m.order.as<std::int32_t>(), A), HostInts(order_h_.data(), A));
  Kokkos::deep_copy(space_, DeviceInts(m.pos.as<std::int32_t>(), A), HostInts(pos_h_.data(), A));
  space_.fence();   // the host arrays are refilled by the next MoE layer

  T* xp = m.xp.as<T>();
  kernels::moe_permute(space_, N, k, D, m.order.as<std::int32_t>(), h2, xp);
  // The experts this rank computes and their rows: every expert over xp, or (expert
  // parallelism) its own experts over the rows every rank sent them, local expert by expert.
  // Either way the unit buffer holds those experts from the first expert's place on (the
  // expert-parallel gather copies only this rank's there), so local expert j is at expert j's
  // offsets.
  ExpertExchange* const ep = options_.expert_exchange;
  ExchangeBuffers& x = ep_;
  if (ep) dispatch_to_experts<T>(m);
  const std::vector<std::int32_t>& offsets = ep ? x.local_offsets : m.offsets;
  T* ea = ep ? x.ea.as<T>() : m.ea.as<T>();
  expert_hidden(w, o, ep ? x.xl.as<T>() : xp, offsets, ep ? x.eg.as<T>() : m.eg.as<T>(),
                ep ? x.eu.as<T>() : m.eu.as<T>(), ea, adapters);
  // y_e = a_e Wd_e^T.
  T* yp = m.yp.as<T>();
  T* y_rows = ep ? x.rows_b.as<T>() : yp;
  expert_products<T, T>(Op::N, Op::T, RowsAre::m, D, Fe, routed_rows<const T>(ea, Fe),
                        expert_weights(w + o.expert_down, o.expert_stride_out, Fe), 0.0f, routed_rows(y_rows, D),
                        offsets);
  if (adapters && o.expert_lora_a[2] >= 0) expert_adapter_forward<T>(w, o, 2, ea, Fe, y_rows, D, offsets);
  if (ep) return_from_experts<T>(y_rows, yp);
  kernels::moe_combine(space_, N, k, D, m.pos.as<std::int32_t>(), m.gate.as<float>(), yp, out, true);
  if (track_aux) {   // the layer's load-balancing loss, for the metrics
    kernels::router_counts(space_, rs, m.expert.as<std::int32_t>(), counted(), counts_.as<std::int32_t>());
    kernels::router_aux_loss(space_, rs, 1.0f, m.probs.as<float>(), counted(), counts_.as<std::int32_t>(),
                             aux_.as<float>());
    kernels::add_scaled(space_, aux_.as<float>(), aux_.as<float>() + 1, aux_loss_weight_, 1);
  }
  if (o.gate >= 0) {   // the shared expert, on every token
    T* g = static_cast<T*>(shared.g);
    T* u = static_cast<T*>(shared.u);
    T* a = static_cast<T*>(shared.a);
    mm.gemm(Op::N, Op::T, N, Fe, D, 1.0f, h2, D, w + o.gate, D, 0.0f, g, Fe);
    mm.gemm(Op::N, Op::T, N, Fe, D, 1.0f, h2, D, w + o.up, D, 0.0f, u, Fe);
    kernels::swiglu_forward(space_, g, u, a, long(N) * Fe);
    mm.gemm(Op::N, Op::T, N, D, Fe, 1.0f, a, Fe, w + o.down, Fe, 1.0f, out, D);
  }
}

template <class T>
void MoeLayers::backward(int set, const LayerOffsets& o, const T* w, float* g, bool base_frozen, const T* h2,
                         const T* dres, T* dh, const SharedExpert& shared, const SharedExpertGrads& grads, int N) {
  float* const base_g = base_frozen ? nullptr : g;   // null: no base weight gradient
  const ModelShape& s = options_.shape;
  const int D = s.d_model, E = s.n_experts, k = s.top_k, Fe = s.d_ff_expert;
  LayerBuffers& m = sets_[static_cast<std::size_t>(set)];
  Gemm& mm = gemm_;

  const bool has_shared = o.gate >= 0;
  if (has_shared) {
    T* da = static_cast<T*>(grads.da);
    T* dg = static_cast<T*>(grads.dg);
    T* du = static_cast<T*>(grads.du);
    mm.gemm(Op::N, Op::N, N, Fe, D, 1.0f, dres, D, w + o.down, Fe, 0.0f, da, Fe);
    if (base_g) wgrad_.add(dres, static_cast<const T*>(shared.a), base_g + o.down, D, Fe, N);
    kernels::swiglu_backward(space_, static_cast<const T*>(shared.g), static_cast<const T*>(shared.u), da, dg, du,
                             long(N) * Fe);
    mm.gemm(Op::N, Op::N, N, D, Fe, 1.0f, dg, Fe, w + o.gate, D, 0.0f, dh, D);
    mm.gemm(Op::N, Op::N, N, D, Fe, 1.0f, du, Fe, w + o.up, D, 1.0f, dh, D);
    if (base_g) {
      wgrad_.add(static_cast<const T*>(dg), h2, base_g + o.gate, Fe, D, N);
      wgrad_.add(static_cast<const T*>(du), h2, base_g + o.up, Fe, D, N);
    }
  }
  T* dyp = dyp_.as<T>();
  float* dgate = dgate_.as<float>();
  kernels::moe_combine_backward(space_, N, k, D, m.pos.as<std::int32_t>(), m.gate.as<float>(), m.yp.as<T>(), dres,
                                dyp, dgate);
  // This rank's experts and their rows, as in forward: the output gradients of every expert's
  // rows here, or (expert parallelism) the dispatch and the gate and up products redone for
  // this layer, then the output gradients sent to the experts' ranks.
  ExpertExchange* const ep = options_.expert_exchange;
  ExchangeBuffers& x = ep_;
  const std::vector<std::int32_t>& offsets = ep ? x.local_offsets : m.offsets;
  const T* x_rows = ep ? x.xl.as<T>() : m.xp.as<T>();
  T* eg = ep ? x.eg.as<T>() : m.eg.as<T>();
  T* eu = ep ? x.eu.as<T>() : m.eu.as<T>();
  T* ea = ep ? x.ea.as<T>() : m.ea.as<T>();
  const T* dy_rows = dyp;
  T* dx_rows = dyp;   // the routed inputs' gradient reuses dyp's buffer once dy is consumed
  if (ep) {
    dispatch_to_experts<T>(m);
    expert_hidden(w, o, x_rows, offsets, eg, eu, ea, true);
    dy_rows = gradients_to_experts(dyp);
    dx_rows = x.rows_a.as<T>();
  }
  const long rows = offsets.back();
  // Down: da_e = dy_e Wd_e; dWd_e += dy_e^T a_e.
  T* dea = dea_.as<T>();
  expert_products<T, T>(Op::N, Op::N, RowsAre::m, Fe, D, routed_rows<const T>(dy_rows, D),
                        expert_weights(w + o.expert_down, o.expert_stride_out, Fe), 0.0f, routed_rows(dea, Fe),
                        offsets);
  if (base_g) expert_weight_grads(dy_rows, D, ea, Fe, base_g, o.expert_down, o.expert_stride_out, D, Fe, offsets);
  // LoRA on the experts' down projection: before dy's buffer takes the inputs' gradient.
  const bool expert_adapters = o.expert_lora_a[0] >= 0;
  if (expert_adapters) expert_adapter_backward<T>(w, o, 2, g, ea, Fe, dy_rows, D, dea, offsets);
  kernels::swiglu_backward(space_, eg, eu, dea, deg_.as<T>(), deu_.as<T>(), rows * Fe);
  // Gate and up: dx_e = dg_e Wg_e + du_e Wu_e; dW += d^T x_e.
  expert_products<T, T>(Op::N, Op::N, RowsAre::m, D, Fe, routed_rows<const T>(deg_.as<T>(), Fe),
                        expert_weights(w + o.expert_gate, o.expert_stride_in, D), 0.0f, routed_rows(dx_rows, D),
                        offsets);
  expert_products<T, T>(Op::N, Op::N, RowsAre::m, D, Fe, routed_rows<const T>(deu_.as<T>(), Fe),
                        expert_weights(w + o.expert_up, o.expert_stride_in, D), 1.0f, routed_rows(dx_rows, D),
                        offsets);
  if (base_g) {
    expert_weight_grads(deg_.as<T>(), Fe, x_rows, D, base_g, o.expert_gate, o.expert_stride_in, Fe, D, offsets);
    expert_weight_grads(deu_.as<T>(), Fe, x_rows, D, base_g, o.expert_up, o.expert_stride_in, Fe, D, offsets);
  }
  if (expert_adapters) {
    expert_adapter_backward<T>(w, o, 0, g, x_rows, D, deg_.as<T>(), Fe, dx_rows, offsets);
    expert_adapter_backward<T>(w, o, 1, g, x_rows, D, deu_.as<T>(), Fe, dx_rows, offsets);
  }
  T* dxp = dyp;
  if (ep) return_from_experts<T>(dx_rows, dxp);
  kernels::moe_permute_backward(space_, N, k, D, m.pos.as<std::int32_t>(), dxp, dh, has_shared);
  // Router: through the gates (and the load-balancing loss) to its logits.
  const kernels::RouterShape rs{N, E, k};
  const float aux = options_.aux_loss_coef * aux_loss_weight_;
  if (aux != 0.0f)
    kernels::router_counts(space_, rs, m.expert.as<std::int32_t>(), counted(), counts_.as<std::int32_t>());
  T* drouter = drouter_.as<T>();
  kernels::router_backward(space_, rs, true, aux, m.probs.as<float>(), m.expert.as<std::int32_t>(),
                           m.gate.as<float>(), counted(), counts_.as<std::int32_t>(), dgate, drouter);
  mm.gemm(Op::N, Op::N, N, D, E, 1.0f, drouter, E, w + o.router, D, 1.0f, dh, D);
  if (base_g) wgrad_.add(static_cast<const T*>(drouter), h2, base_g + o.router, E, D, N);
}

// dW_e (out, in) += dY_e^T X_e over expert e's rows, for every expert: fused, one grouped (or
// per-expert) product with beta = 1 into the fp32 gradient; unfused, per expert into the
// scratch and then added. Counted like every other weight gradient.
template <class T>
void MoeLayers::expert_weight_grads(const T* dY, int ld_dy, const T* X, int ld_x, float* g, std::int64_t first,
                                      std::int64_t stride, int out, int in, const std::vector<std::int32_t>& offsets) {
  const int E = static_cast<int>(offsets.size()) - 1;
  if (wgrad_.fused()) {
    expert_products<T, float>(Op::T, Op::N, RowsAre::k, out, in, routed_rows(dY, ld_dy), routed_rows(X, ld_x), 1.0f,
                              expert_weights(g + first, stride, in), offsets);
    wgrad_.count_fused(E);
    return;
  }
  for (int e = 0; e < E; ++e)
    wgrad_.add(dY + long(offsets[e]) * ld_dy, ld_dy, X + long(offsets[e]) * ld_x, ld_x, g + first + e * stride, out, in,
               offsets[e + 1] - offsets[e]);
}

void MoeLayers::set_counted_tokens(const std::int32_t* row_tokens, int B, int S) {
  every_token_counted_ = row_tokens == nullptr;
  if (every_token_counted_) return;
  const std::size_t N = std::size_t(B) * S;
  SHARDRL_CHECK(N <= counted_h_.size(), "a batch larger than the MoE buffers");
  for (int b = 0; b < B; ++b) {
    SHARDRL_CHECK(row_tokens[b] >= 0 && row_tokens[b] <= S,
                  fmt::format("row {} of the batch: {} tokens in a row of {}", b, row_tokens[b], S));
    for (int t = 0; t < S; ++t) counted_h_[std::size_t(b) * S + t] = t < row_tokens[b] ? 1 : 0;
  }
  Kokkos::deep_copy(space_, DeviceInts(counted_.data(), N), HostInts(counted_h_.data(), N));
  space_.fence();   // counted_h_ is refilled by the next batch
}

void MoeLayers::reset_aux_loss() { kernels::fill(space_, aux_.as<float>(), 0.0f, 2); }

double MoeLayers::aux_loss() const {
  float sum = 0.0f;
  Kokkos::deep_copy(space_, Kokkos::View<float, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&sum),
                    Kokkos::View<const float, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        aux_.as<float>() + 1));
  space_.fence();
  return sum;
}

template void MoeLayers::forward<float>(int, const LayerOffsets&, const float*, const float*, float*,
                                        const SharedExpert&, int, bool, bool);
template void MoeLayers::forward<bf16>(int, const LayerOffsets&, const bf16*, const bf16*, bf16*, const SharedExpert&,
                                       int, bool, bool);
template void MoeLayers::backward<float>(int, const LayerOffsets&, const float*, float*, bool, const float*,
                                         const float*, float*, const SharedExpert&, const SharedExpertGrads&, int);
template void MoeLayers::backward<bf16>(int, const LayerOffsets&, const bf16*, float*, bool, const bf16*, const bf16*,
                                        bf16*, const SharedExpert&, const SharedExpertGrads&, int);

}  // namespace shardrl
