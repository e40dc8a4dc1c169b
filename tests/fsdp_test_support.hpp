// The sharded trainer's test rig, shared by the test_fsdp*.cpp files: a fixed global batch, the
// unsharded single-rank reference, the same steps sharded over every rank, and their comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "config/model_presets.hpp"
#include "fsdp/comm_expert_exchange.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "model/dense_parameters.hpp"

namespace shardrl::fsdp_test {

inline constexpr int kGlobalSequences = 24;   // divisible by 1, 2, 3, 4 and 8 ranks
inline constexpr int kS = 9;

inline Communicator& comm() {
  static std::unique_ptr<Communicator> c = make_communicator(
      has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD, 120.0);
  return *c;
}

inline ModelShape shape(bool tied = false) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  s.tie_embeddings = tied;
  return s;
}

// The same with every layer a mixture of `experts` experts (top 2, 24 wide) and a shared expert.
inline ModelShape moe_shape(int experts) {
  ModelShape s = shape();
  s.n_experts = experts;
  s.top_k = 2;
  s.d_ff_expert = 24;
  s.shared_expert = true;
  return s;
}

inline ModelOptions model_opts(const ModelShape& s, int rows, Precision p = Precision::fp32,
                               MoeImpl impl = MoeImpl::grouped) {
  ModelOptions o;
  o.moe_impl = impl;
  o.shape = s;
  o.precision = p;
  o.max_batch = rows;
  o.max_seq_len = kS;
  return o;
}

// The global batch, fixed by the seed: sequence i has tokens, next-token targets and a mask
// (the last two positions of every third sequence are padding).
struct GlobalBatch {
  std::vector<std::int32_t> tokens, targets;
  std::vector<float> mask;
  explicit GlobalBatch(int vocab, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> tok(0, vocab - 1);
    for (int i = 0; i < kGlobalSequences; ++i)
      for (int s = 0; s < kS; ++s) {
        tokens.push_back(tok(gen));
        mask.push_back(i % 3 == 0 && s >= kS - 2 ? 0.0f : 1.0f);
      }
    for (std::size_t n = 0; n < tokens.size(); ++n) targets.push_back((n + 1) % kS == 0 ? tokens[n] : tokens[n + 1]);
  }
  float scale() const { return 1.0f / std::accumulate(mask.begin(), mask.end(), 0.0f); }
};

// Puts sequences [first, first + count) of `b` on the model and returns their mask on the device.
inline DeviceView<float> load(Transformer& model, const GlobalBatch& b, int first, int count) {
  model.set_batch(b.tokens.data() + first * kS, b.targets.data() + first * kS, count, kS);
  DeviceView<float> mask("mask", count * kS);
  auto h = Kokkos::create_mirror_view(mask);
  for (int i = 0; i < count * kS; ++i) h(i) = b.mask[first * kS + i];
  Kokkos::deep_copy(mask, h);
  return mask;
}

// Whether the optimizer moves `p`: every parameter, or with LoRA the adapters only.
inline bool trains(const UnitSpec& unit, const ParamSpec& p, const ModelShape& s) {
  return !s.lora.on() || (unit.adapters_begin >= 0 && p.offset >= unit.adapters_begin);
}

// The unsharded reference: all sequences on one rank, whole units, the same optimizer.
inline std::vector<std::vector<float>> reference_weights(const ModelShape& s, const OptimizerOptions& oo, int steps,
                                                         const std::vector<GlobalBatch>& batches) {
  Transformer model(model_opts(s, kGlobalSequences), ExecSpace());
  DenseParameters p(model, ExecSpace());
  p.initialize(42, 0.02f);
  Optimizer opt(oo, ExecSpace());
  std::vector<DeviceView<float>> m, v;
  for (int u = 0; u < model.unit_count(); ++u) {
    m.emplace_back("m", p.numel(u));
    v.emplace_back("v", p.numel(u));
  }
  DeviceView<float> loss("loss", 1);
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch& b = batches[step % batches.size()];
    auto mask = load(model, b, 0, kGlobalSequences);
    p.zero_grads();
    forward_backward(model, p, mask.data(), b.scale(), loss.data());
    opt.begin_norm();
    for (int u = 0; u < model.unit_count(); ++u) opt.accumulate_sumsq(p.grads(u), p.numel(u));
    opt.prepare_step();
    for (int u = 0; u < model.unit_count(); ++u)
      for (const auto& ps : model.units()[u].params)
        if (trains(model.units()[u], ps, s))
        opt.update(p.main_weights(u) + ps.offset, p.grads(u) + ps.offset, m[u].data() + ps.offset,
                   v[u].data() + ps.offset, ps.numel(), ps.no_decay ? 0.0f : oo.weight_decay);
    p.refresh_compute_weights();
  }
  std::vector<std::vector<float>> out;
  for (int u = 0; u < model.unit_count(); ++u) {
    Kokkos::View<float*, Kokkos::HostSpace> h("h", p.numel(u));
    Kokkos::deep_copy(h, Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(p.main_weights(u), p.numel(u)));
    out.emplace_back(h.data(), h.data() + p.numel(u));
  }
  return out;
}

// `steps` sharded steps; each rank trains its share of the global batch in `micro` micro-batches.
inline std::vector<std::vector<float>> sharded_weights(const ModelShape& s, const FsdpOptions& fo,
                                                       const OptimizerOptions& oo, int steps,
                                                       const std::vector<GlobalBatch>& batches, int micro = 1,
                                                       StepMetrics* metrics = nullptr, MoeImpl impl = MoeImpl::grouped,
                                                       bool recompute = false, StepProfile* profile = nullptr,
                                                       int spare_rows = 0) {
  if (kGlobalSequences % comm().size() != 0 || kGlobalSequences / comm().size() % micro != 0)
    throw std::runtime_error("test_fsdp: the global batch does not split into equal shares at this world size");
  const int per_rank = kGlobalSequences / comm().size(), rows = per_rank / micro;
  ModelOptions mo = model_opts(s, rows + spare_rows, Precision::fp32, impl);   // room for more than the batch
  mo.activation_recompute = recompute;
  std::unique_ptr<CommExpertExchange> exchange;
  if (fo.expert_parallel) {
    exchange = std::make_unique<CommExpertExchange>(comm(), ExecSpace());
    mo.expert_exchange = exchange.get();
  }
  Transformer model(mo, ExecSpace());
  ShardedTrainer trainer(model, comm(), fo, oo);
  trainer.initialize(42, 0.02f);
  DeviceView<float> loss("loss", 1);
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch& b = batches[step % batches.size()];
    for (int k = 0; k < micro; ++k) {
      auto mask = load(model, b, comm().rank() * per_rank + k * rows, rows);
      trainer.forward_backward(mask.data(), b.scale(), loss.data());
    }
    trainer.optimizer_step();
  }
  if (metrics) *metrics = trainer.metrics();
  if (profile) *profile = trainer.profile();
  std::vector<std::vector<float>> out;
  for (int u = 0; u < model.unit_count(); ++u) out.push_back(trainer.gather_main_weights(u));
  return out;
}

// Per unit, the relative error of the whole tensor: ||got - want|| / ||want||. (Element-wise,
// weights that AdamW moved by a gradient near zero differ by rounding relative to themselves.)
inline void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                         double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t u = 0; u < got.size(); ++u) {
    ASSERT_EQ(got[u].size(), want[u].size()) << what << " unit " << u;
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < got[u].size(); ++i) {
      diff += (double(got[u][i]) - want[u][i]) * (double(got[u][i]) - want[u][i]);
      norm += double(want[u][i]) * want[u][i];
    }
    EXPECT_LE(std::sqrt(diff), rel * std::sqrt(norm)) << what << ": unit " << u << " relative error "
                                                      << std::sqrt(diff / norm);
    worst = std::max(worst, norm > 0 ? std::sqrt(diff / norm) : 0.0);
  }
  if (comm().rank() == 0) std::printf("%s at np %d: worst relative error %.2e\n", what, comm().size(), worst);
}

inline FsdpOptions checked() {
  FsdpOptions o;
  o.check_released = true;
  return o;
}

// eps = 1e-4 keeps the comparison well-conditioned. AdamW moves a weight by about
// lr * g / (|g| + eps): where |g| is near eps, d(update)/dg ~ lr / eps, so the rounding
// differences of a different summation order (~1e-10 absolute in a gradient of 1e-3) grow to
// 1e-6 in the weight with eps = 1e-6, and with eps = 1e-8 a gradient that cancels to ~1e-9
// flips its update's sign (both seen at np 2-4). With eps = 1e-4 the worst case is lr * 1e-6.
inline OptimizerOptions adamw() {
  OptimizerOptions o;
  o.lr = 1e-2f;
  o.eps = 1e-4f;
  o.weight_decay = 0.1f;
  o.clip_grad_norm = 1.0f;
  return o;
}

}  // namespace shardrl::fsdp_test
