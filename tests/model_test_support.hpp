// The model tests' rig (test_model*.cpp): the tiny shape and its LoRA and MoE variants, a
// padded batch, a model with its parameters, the fp64 reference and the finite-difference check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "config/load.hpp"
#include "job/options.hpp"
#include "model/dense_parameters.hpp"
#include "model/transformer.hpp"
#include "reference_model.hpp"

namespace shardrl::model_test {

inline ModelShape tiny_shape(bool tied = false, bool qk_norm = true) {
  LoadedConfig l = load_config("", "tiny", {}, this_build());
  ModelShape s = resolve_model_shape(l.config.model);
  s.tie_embeddings = tied;
  s.qk_norm = qk_norm;
  return s;
}

inline ModelOptions options(const ModelShape& shape, Precision p, int B, int S, bool fusion = true,
                     bool recompute = false) {
  ModelOptions o;
  o.shape = shape;
  o.precision = p;
  o.gradient_accumulation_fusion = fusion;
  o.activation_recompute = recompute;
  o.max_batch = B;
  o.max_seq_len = S;
  return o;
}

// A batch of B sequences of S random tokens; the last sequence right-padded after `S - 2`
// positions (mask 0 there, and left out of MoE's load-balancing loss), so padding and the loss
// mask are exercised.
struct Batch {
  int B, S;
  std::vector<std::int32_t> tokens, targets;
  std::vector<float> mask;
  std::vector<std::int32_t> positions;   // empty: one right-padded sequence per row
  std::vector<std::int32_t> row_tokens;  // each row's tokens before its padding
  Batch(int B_, int S_, int V, std::uint64_t seed)
      : B(B_), S(S_), tokens(B_ * S_), targets(B_ * S_), mask(B_ * S_, 1.0f), row_tokens(B_, S_) {
    row_tokens.back() = S - 2;
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> tok(0, V - 1);
    for (auto& t : tokens) t = tok(gen);
    for (int i = 0; i < B * S; ++i) targets[i] = (i + 1) % S == 0 ? tokens[i] : tokens[i + 1];
    for (int s = S - 2; s < S; ++s) mask[(B - 1) * S + s] = 0.0f;
  }
  float count() const { return std::accumulate(mask.begin(), mask.end(), 0.0f); }
};

// Model, parameters and device-side loss/mask for one configuration.
struct Rig {
  Transformer model;
  DenseParameters params;
  DeviceView<float> mask{"mask", 1}, loss{"loss", 1};
  Rig(const ModelOptions& o, std::uint64_t seed, float init_std = 0.02f)
      : model(o, ExecSpace()), params(model, ExecSpace()) {
    params.initialize(seed, init_std);
  }
  void set(const Batch& b) {
    model.set_batch(b.tokens.data(), b.targets.data(), b.B, b.S, b.positions.empty() ? nullptr : b.positions.data(),
                    b.row_tokens.data());
    mask = DeviceView<float>("mask", b.mask.size());
    auto h = Kokkos::create_mirror_view(mask);
    for (std::size_t i = 0; i < b.mask.size(); ++i) h(i) = b.mask[i];
    Kokkos::deep_copy(mask, h);
  }
  // Mean masked NLL and its gradients (grads zeroed first).
  double step(float scale) {
    params.zero_grads();
    Kokkos::deep_copy(loss, 0.0f);
    forward_backward(model, params, mask.data(), scale, loss.data());
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
    return h(0);
  }
  // Sum over masked tokens of -logp, accumulated in double on the host (forward only).
  double nll_sum(const Batch& b) {
    const void* embed = params.compute_weights(0);
    for (int u = 0; u < model.unit_count(); ++u)
      model.forward_unit(u, params.compute_weights(u), u == model.head_unit() ? embed : nullptr);
    auto h = Kokkos::create_mirror_view_and_copy(
        Kokkos::HostSpace(), Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                 model.logp(), b.B * b.S));
    double sum = 0;
    for (int i = 0; i < b.B * b.S; ++i) sum -= b.mask[i] * double(h(i));
    return sum;
  }
  // Every LoRA B (zero at initialisation) to N(0, 0.05^2) values, seeded.
  void randomize_lora_b(std::uint64_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (int u = 0; u < model.unit_count(); ++u) {
      std::vector<float> w = host(params.main_weights(u), params.numel(u));
      for (const auto& p : model.units()[u].params)
        if (p.name.find(".lora_B.") != std::string::npos)
          for (std::int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] = normal(gen);
      Kokkos::deep_copy(Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(params.main_weights(u),
                                                                                              w.size()),
                        Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(w.data(),
                                                                                                       w.size()));
    }
    params.refresh_compute_weights();
  }
  std::vector<float> host(const float* p, std::int64_t n) {
    std::vector<float> out(n);
    Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> dst(out.data(), n);
    Kokkos::deep_copy(dst, Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(p, n));
    return out;
  }
};

// The fp64 reference with the rig's weights.
inline test::ReferenceModel reference_of(Rig& rig) {
  std::vector<std::vector<double>> w;
  for (int u = 0; u < rig.model.unit_count(); ++u) {
    auto f = rig.host(rig.params.main_weights(u), rig.params.numel(u));
    w.emplace_back(f.begin(), f.end());
  }
  return test::ReferenceModel(rig.model.options().shape, rig.model.units(), std::move(w));
}

// The loss the model's step differentiates: masked NLL plus, for MoE layers, aux_coef times
// their load-balancing losses.
inline double nll(const test::ReferenceModel& ref, const Batch& b, double aux_coef = 0) {
  auto lp = ref.logp(b.tokens, b.targets, b.B, b.S, b.row_tokens);
  double sum = 0;
  for (std::size_t i = 0; i < lp.size(); ++i) sum -= b.mask[i] * lp[i];
  return sum + aux_coef * ref.aux_loss();
}

// The fp32 model's hand-written gradients against central finite differences of the loss,
// computed in fp64 by the reference (fp32 differences are noise-bound: the loss's rounding,
// ~1e-7 relative, divided by h, rivals many gradients). >= 200 entries over every tensor.
inline void gradient_check(const ModelShape& s, int entries_per_tensor, float aux_coef = 0.0f,
                    MoeImpl impl = MoeImpl::grouped) {
  Batch b(2, 7, s.vocab_size, 3);
  ModelOptions o = options(s, Precision::fp32, 2, 7);
  o.aux_loss_coef = aux_coef;
  o.moe_impl = impl;
  Rig rig(o, 11);
  // LoRA's B starts at zero, where A's gradient is zero too: give every B weights first.
  if (s.lora.on()) rig.randomize_lora_b(13);
  rig.set(b);
  rig.model.reset_aux_loss();
  rig.step(1.0f);   // loss = sum of NLL over masked tokens
  test::ReferenceModel ref = reference_of(rig);
  if (s.n_experts > 0) {   // the load-balancing losses the metrics report, padding left out
    nll(ref, b);
    EXPECT_NEAR(rig.model.aux_loss(), ref.aux_loss(), 1e-5 * ref.aux_loss()) << "MoE load-balancing loss";
  }
  std::mt19937 gen(5);
  int checked = 0;
  double worst = 0;
  for (int u = 0; u < rig.model.unit_count(); ++u) {
    std::vector<float> g = rig.host(rig.params.grads(u), rig.params.numel(u));
    const std::int64_t adapters = rig.model.units()[u].adapters_begin;
    for (const auto& p : rig.model.units()[u].params) {
      if (s.lora.on() && (adapters < 0 || p.offset < adapters)) {
        // LoRA: the base is frozen, its gradient never written.
        for (std::int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(g[p.offset + i], 0.0f) << p.name << " is frozen";
        continue;
      }
      // Entries whose gradient is at least 1e-3 of the tensor's largest: smaller ones are sums
      // that cancel, where fp32 rounding of the analytic value itself exceeds 1e-3 relative.
      double gmax = 0;
      for (std::int64_t i = 0; i < p.numel(); ++i) gmax = std::max(gmax, double(std::fabs(g[p.offset + i])));
      std::vector<std::int64_t> candidates;
      for (std::int64_t i = 0; i < p.numel(); ++i)
        if (std::fabs(g[p.offset + i]) >= 1e-3 * gmax) candidates.push_back(p.offset + i);
      ASSERT_FALSE(candidates.empty()) << p.name << " has an all-zero gradient";
      std::shuffle(candidates.begin(), candidates.end(), gen);
      for (int e = 0; e < entries_per_tensor && e < static_cast<int>(candidates.size()); ++e) {
        const std::int64_t i = candidates[e];
        double& w = ref.unit(u)[i];
        const double w0 = w, h = 1e-5;
        w = w0 + h;
        double up = nll(ref, b, aux_coef);
        w = w0 - h;
        double down = nll(ref, b, aux_coef);
        w = w0;
        double fd = (up - down) / (2.0 * h);
        double rel = std::fabs(fd - g[i]) / std::max(std::fabs(fd), std::fabs(double(g[i])));
        worst = std::max(worst, rel);
        EXPECT_LT(rel, 1e-3) << p.name << "[" << i - p.offset << "]: analytic " << g[i] << ", finite difference " << fd;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 200);
  std::printf("gradient check: %d entries, worst relative error %.2e\n", checked, worst);
}

// Cosine and relative error of two units' gradients.
struct GradAgreement {
  double cosine, rel_err;
};
inline GradAgreement agreement(const std::vector<float>& want, const std::vector<float>& got) {
  double dot = 0, nw = 0, ng = 0, diff = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    dot += double(want[i]) * got[i];
    nw += double(want[i]) * want[i];
    ng += double(got[i]) * got[i];
    diff += (double(want[i]) - got[i]) * (double(want[i]) - got[i]);
  }
  return {dot / std::sqrt(nw * ng), std::sqrt(diff / nw)};
}

// LoRA (rank 4, alpha 8) on every linear layer of the tiny shape, or on some.
inline ModelShape lora_shape(std::uint32_t targets = 0x7f, bool tied = false) {
  ModelShape s = tiny_shape(tied);
  s.lora.rank = 4;
  s.lora.alpha = 8;
  s.lora.targets = targets;
  return s;
}


// Mixture-of-experts layers: 4 experts, top 2, gates renormalised; every `every`-th layer MoE,
// with a shared expert or not.
inline ModelShape moe_shape(int every, bool shared) {
  ModelShape s = tiny_shape();
  s.n_experts = 4;
  s.top_k = 2;
  s.d_ff_expert = 24;
  s.moe_every = every;
  s.shared_expert = shared;
  return s;
}

}  // namespace shardrl::model_test
