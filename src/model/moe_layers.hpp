// Internal to the model: the mixture-of-experts MLPs of a Transformer (moe_layers.cpp), with
// everything they own: each MoE layer's activations kept for backward (or one shared set with
// activation recompute and in decoding), the backward scratch the layers share, the routing's
// host copies, expert parallelism's exchange buffers, the load-balancing loss and the counters
// of how the experts' GEMMs were issued. The Transformer calls forward/backward for an MoE
// layer with the layer's weights (its one gathered unit) and the dense buffers the shared expert
// uses; nothing of the MoE state lives in the Transformer.
#pragma once

#include <cstdint>
#include <vector>

#include "blas/gemm.hpp"
#include "core/kokkos.hpp"
#include "model/activations.hpp"
#include "model/transformer.hpp"
#include "model/weight_gradients.hpp"

namespace shardrl {

class MoeLayers {
 public:
  // Buffers for N tokens: `sets` sets of per-layer activations, set i for layer i (or set 0 for
  // every layer when sets == 1); `moe_set(i)` says which sets belong to MoE layers.
  MoeLayers(const ModelOptions& options, const ExecSpace& space, Gemm& gemm, WeightGradients& wgrad,
            std::size_t tokens, int sets, bool training, BufferMaker& make);

  // The dense buffers an MoE layer's shared expert uses (the layer's own MLP buffers).
  struct SharedExpert {
    void* g;
    void* u;
    void* a;   // (N, d_ff_expert) each, compute type: kept for backward
  };
  struct SharedExpertGrads {
    void* da;
    void* dg;
    void* du;   // (N, d_ff_expert) each, compute type: backward scratch
  };

  // out (N, D) holds the attention block's output; the layer's MLP output is added into it. h2
  // (N, D) is the normed input. With track_aux the layer's load-balancing loss is summed for
  // the metrics (training forwards only, not recomputations).
  // `adapters`: LoRA's experts' adapters take part (off: the frozen base, e.g. decoding with
  // the adapters folded into the weights).
  template <class T>
  void forward(int set, const LayerOffsets& o, const T* w, const T* h2, T* out, const SharedExpert& shared, int N,
               bool track_aux, bool adapters = true);
  // dres (N, D): the gradient at the layer's output; writes dh (N, D), the gradient at h2, and
  // accumulates the layer's weight gradients into g: with `base_frozen` (LoRA) only the experts'
  // adapters' (the input gradient still flows through the router and the experts).
  template <class T>
  void backward(int set, const LayerOffsets& o, const T* w, float* g, bool base_frozen, const T* h2, const T* dres,
                T* dh, const SharedExpert& shared, const SharedExpertGrads& grads, int N);

  // Which of the batch's B rows of S tokens the load-balancing loss counts: row b's first
  // row_tokens[b] (host; null: all), the rest being padding, which Hugging Face's
  // attention_mask leaves out of its load_balancing_loss_func too.
  void set_counted_tokens(const std::int32_t* row_tokens, int B, int S);
  const MoeCallCounters& calls() const { return calls_; }
  void set_aux_loss_weight(float weight) { aux_loss_weight_ = weight; }
  void reset_aux_loss();
  double aux_loss() const;

 private:
  // What an MoE layer keeps from forward for backward (A = tokens x top_k routed rows).
  struct LayerBuffers {
    DeviceBytes router_logits;                 // (N, E) compute type
    DeviceBytes probs, gate;                   // (N, E), (A) fp32
    DeviceBytes expert, order, pos;            // (A), (A), (A) int32
    DeviceBytes xp, eg, eu, ea, yp;            // (A, D), (A, Fe) x 3 (not with expert parallelism), (A, D)
    std::vector<std::int32_t> offsets;         // (E + 1) on the host: expert e's rows
  };
  // Expert parallelism's buffers, shared by the MoE layers: each layer's backward redoes its
  // dispatch and its experts' gate and up products, so nothing of the size below stays per
  // layer. R = ranks x A, the most rows this rank's experts can receive.
  struct ExchangeBuffers {
    DeviceBytes rows_a, rows_b;                // (R, D) what the exchanges send and receive
    DeviceBytes xl, eg, eu, ea;                // (R, D), (R, Fe) x 3: received rows by local expert, their products
    DeviceBytes to_local, to_source;           // (R) int32: arrival order <-> local order
    std::vector<std::size_t> send_rows, send_first, recv_rows, recv_first;   // (ranks) each
    std::vector<std::int32_t> local_offsets;   // (E / ranks + 1): local expert j's rows of xl
    std::vector<std::int32_t> send_counts, recv_counts, to_local_h, to_source_h;   // host scratch
  };

  const std::int32_t* counted() const { return every_token_counted_ ? nullptr : counted_.data(); }
  template <class T> void dispatch_to_experts(const LayerBuffers& m);
  template <class T> void return_from_experts(const T* local_rows, T* out);
  template <class T> const T* gradients_to_experts(const T* dyp);
  template <class T>
  void expert_hidden(const T* w, const LayerOffsets& o, const T* x_rows, const std::vector<std::int32_t>& offsets,
                     T* eg, T* eu, T* ea, bool adapters);
  // LoRA on the experts' projection j (0 gate, 1 up, 2 down) of `in` -> `out` features: y_rows
  // += scale (x_rows A_e^T) B_e^T per expert, through the scratch t_.
  template <class T>
  void expert_adapter_forward(const T* w, const LayerOffsets& o, int j, const T* x_rows, int in, T* y_rows, int out,
                              const std::vector<std::int32_t>& offsets);
  // Its backward: dx_rows += scale (dy_rows B_e) A_e, dB_e += dy^T (scale x A_e^T), dA_e +=
  // (scale dy B_e)^T x, for every expert (t_ and dt_ scratch).
  template <class T>
  void expert_adapter_backward(const T* w, const LayerOffsets& o, int j, float* g, const T* x_rows, int in,
                               const T* dy_rows, int out, T* dx_rows, const std::vector<std::int32_t>& offsets);
  // An operand of every expert's product: expert e's starts at base + e * per_expert + (its
  // first routed row) * per_row. Experts' weights advance per expert, routed activations per row.
  template <class T>
  struct ExpertOperand {
    T* base;
    long per_expert, per_row;
    int ld;
  };
  template <class T>
  static ExpertOperand<T> expert_weights(T* first, long stride, int ld) { return {first, stride, 0, ld}; }
  template <class T> static ExpertOperand<T> routed_rows(T* base, int ld) { return {base, 0, ld, ld}; }
  // Which size of expert e's product is its routed row count: m (forward and input gradients,
  // the other two sizes `a`, `b` being n and k) or k (weight gradients: `a`, `b` are m and n).
  enum class RowsAre { m, k };
  // One product per expert; grouped: one call, loop: expert by expert.
  template <class TA, class TC>
  void expert_products(Op opA, Op opB, RowsAre rows_are, int a, int b, ExpertOperand<const TA> A,
                       ExpertOperand<const TA> B, float beta, ExpertOperand<TC> C,
                       const std::vector<std::int32_t>& offsets, float alpha = 1.0f);
  template <class T>
  void expert_weight_grads(const T* dY, int ld_dy, const T* X, int ld_x, float* g, std::int64_t first,
                           std::int64_t stride, int out, int in, const std::vector<std::int32_t>& offsets);

  const ModelOptions options_;
  ExecSpace space_;
  Gemm& gemm_;
  WeightGradients& wgrad_;
  std::vector<LayerBuffers> sets_;             // per set; empty buffers for dense layers' sets
  // Backward scratch shared by the layers (training only).
  DeviceBytes dyp_;                            // (A, D): the routed outputs' gradient, then the inputs'
  DeviceBytes dgate_;                          // (A) fp32
  DeviceBytes dea_, deg_, deu_;                // (R, Fe) each
  DeviceBytes drouter_;                        // (N, E)
  DeviceBytes lora_t_, lora_dt_;               // LoRA on experts: (R, rank) each, compute type
  DeviceBytes counts_;                         // (E + 1) int32: counted tokens routed to each expert, and all
  LedgerView<std::int32_t> counted_;           // (N): 1 for the tokens the aux loss counts, 0 for padding
  bool every_token_counted_ = true;            // counted_ not read: the kernels get null
  // One layer's load-balancing loss, then the weighted sum that aux_loss() reads: (2) fp32, kept
  // across phases (not in the arena).
  DeviceBytes aux_;
  std::vector<std::int32_t> expert_h_, order_h_, pos_h_;   // (A) each: the routing on the host
  std::vector<std::int32_t> counted_h_;        // (N): counted_'s host side
  ExchangeBuffers ep_;                         // with expert parallelism only
  MoeCallCounters calls_;
  float aux_loss_weight_ = 1.0f;
};

}  // namespace shardrl
