// The whole model on one rank: parameter layout, fresh loss, gradients against central finite
// differences, bf16 against fp32, the two weight-gradient paths, activation recompute, and a
// tiny model overfitting one batch with AdamW.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "config/load.hpp"
#include "job/options.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"
#include "model/dense_parameters.hpp"
#include "model/transformer.hpp"
#include "optim/adamw.hpp"
#include "reference_model.hpp"

namespace shardrl {
namespace {

ModelShape tiny_shape(bool tied = false, bool qk_norm = true) {
  LoadedConfig l = load_config("", "tiny", {}, this_build());
  ModelShape s = resolve_model_shape(l.config.model);
  s.tie_embeddings = tied;
  s.qk_norm = qk_norm;
  return s;
}

ModelOptions options(const ModelShape& shape, Precision p, int B, int S, bool fusion = true,
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
// positions (mask 0 there), so padding and the loss mask are exercised.
struct Batch {
  int B, S;
  std::vector<std::int32_t> tokens, targets;
  std::vector<float> mask;
  std::vector<std::int32_t> positions;   // empty: one right-padded sequence per row
  Batch(int B_, int S_, int V, std::uint64_t seed) : B(B_), S(S_), tokens(B_ * S_), targets(B_ * S_), mask(B_ * S_, 1.0f) {
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
    model.set_batch(b.tokens.data(), b.targets.data(), b.B, b.S, b.positions.empty() ? nullptr : b.positions.data());
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

TEST(Model, ParametersFollowHuggingFaceNamesAndAlignment) {
  ModelShape s = tiny_shape();
  auto units = model_units(s);
  ASSERT_EQ(static_cast<int>(units.size()), s.n_layers + 2);
  EXPECT_EQ(units[0].params[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(units[1].param(".q_proj.weight").name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(units[2].param(".q_norm.weight").name, "model.layers.1.self_attn.q_norm.weight");
  EXPECT_EQ(units.back().params.back().name, "lm_head.weight");
  std::int64_t total = 0;
  for (const auto& u : units)
    for (const auto& p : u.params) {
      EXPECT_EQ(p.offset % kParamAlignElements, 0) << p.name;
      total += p.numel();
    }
  EXPECT_EQ(total, s.parameter_count());
  EXPECT_FALSE(model_units(tiny_shape(true)).back().has("lm_head.weight"));
}

TEST(Model, FreshLossIsNearLnVocab) {
  ModelShape s = tiny_shape();
  Batch b(2, 9, s.vocab_size, 1);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    Rig rig(options(s, p, 2, 9), 7);
    rig.set(b);
    double loss = rig.step(1.0f / b.count());
    EXPECT_NEAR(loss, std::log(double(s.vocab_size)), 0.05) << (p == Precision::bf16 ? "bf16" : "fp32");
  }
}

// The fp64 reference with the rig's weights.
test::ReferenceModel reference_of(Rig& rig) {
  std::vector<std::vector<double>> w;
  for (int u = 0; u < rig.model.unit_count(); ++u) {
    auto f = rig.host(rig.params.main_weights(u), rig.params.numel(u));
    w.emplace_back(f.begin(), f.end());
  }
  return test::ReferenceModel(rig.model.options().shape, rig.model.units(), std::move(w));
}

// The loss the model's step differentiates: masked NLL plus, for MoE layers, aux_coef times
// their load-balancing losses.
double nll(const test::ReferenceModel& ref, const Batch& b, double aux_coef = 0) {
  auto lp = ref.logp(b.tokens, b.targets, b.B, b.S);
  double sum = 0;
  for (std::size_t i = 0; i < lp.size(); ++i) sum -= b.mask[i] * lp[i];
  return sum + aux_coef * ref.aux_loss();
}

TEST(Model, ForwardMatchesFp64Reference) {
  for (bool tied : {false, true}) {
    ModelShape s = tiny_shape(tied, !tied);
    Batch b(2, 7, s.vocab_size, 3);
    Rig rig(options(s, Precision::fp32, 2, 7), 11);
    rig.set(b);
    double got = rig.nll_sum(b), want = nll(reference_of(rig), b);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << (tied ? "tied" : "untied");
  }
}

// The fp32 model's hand-written gradients against central finite differences of the loss,
// computed in fp64 by the reference (fp32 differences are noise-bound: the loss's rounding,
// ~1e-7 relative, divided by h, rivals many gradients). >= 200 entries over every tensor.
void gradient_check(const ModelShape& s, int entries_per_tensor, float aux_coef = 0.0f,
                    MoeImpl impl = MoeImpl::grouped) {
  Batch b(2, 7, s.vocab_size, 3);
  ModelOptions o = options(s, Precision::fp32, 2, 7);
  o.aux_loss_coef = aux_coef;
  o.moe_impl = impl;
  Rig rig(o, 11);
  // LoRA's B starts at zero, where A's gradient is zero too: give every B weights first.
  if (s.lora.on()) rig.randomize_lora_b(13);
  rig.set(b);
  rig.step(1.0f);   // loss = sum of NLL over masked tokens
  test::ReferenceModel ref = reference_of(rig);
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

// Llama 3 RoPE scaling on a shape whose head spans all three bands (kept, interpolated, divided).
ModelShape llama3_rope_shape() {
  ModelShape s = tiny_shape(true, false);
  s.rope_scaling_factor = 8;
  s.rope_low_freq_factor = 1;
  s.rope_high_freq_factor = 4;
  s.rope_original_max_position = 64;
  return s;
}

TEST(Model, Llama3RopeScalingMatchesFp64Reference) {
  const ModelShape s = llama3_rope_shape();
  Batch b(2, 7, s.vocab_size, 3);
  // Weights large enough that attention, and so the rotation, moves the loss visibly.
  Rig rig(options(s, Precision::fp32, 2, 7), 11, 0.4f);
  rig.set(b);
  const double got = rig.nll_sum(b), want = nll(reference_of(rig), b);
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want));
  // The scaling changes the model: the same weights without it give another loss.
  ModelShape plain = s;
  plain.rope_scaling_factor = 0;
  test::ReferenceModel scaled = reference_of(rig);
  const test::ReferenceModel unscaled(plain, rig.model.units(), scaled.weights());
  EXPECT_GT(std::fabs(nll(unscaled, b) - want), 1e-3 * std::fabs(want));
}

TEST(Model, GradientsMatchFiniteDifferencesTinyPreset) { gradient_check(tiny_shape(), 8); }
TEST(Model, GradientsMatchFiniteDifferencesLlama3Rope) { gradient_check(llama3_rope_shape(), 10); }
TEST(Model, GradientsMatchFiniteDifferencesTiedNoQkNorm) { gradient_check(tiny_shape(true, false), 10); }

// Cosine and relative error of two units' gradients.
struct GradAgreement {
  double cosine, rel_err;
};
GradAgreement agreement(const std::vector<float>& want, const std::vector<float>& got) {
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
ModelShape lora_shape(std::uint32_t targets = 0x7f, bool tied = false) {
  ModelShape s = tiny_shape(tied);
  s.lora.rank = 4;
  s.lora.alpha = 8;
  s.lora.targets = targets;
  return s;
}

// Adapter gradients against fp64 finite differences through the reference model's own LoRA
// path; every base parameter's gradient stays exactly zero (frozen).
TEST(Model, LoraAdapterGradientsMatchFiniteDifferences) { gradient_check(lora_shape(), 8); }
TEST(Model, LoraOnSomeTargetsTiedEmbeddings) {
  gradient_check(lora_shape((1u << int(LoraTarget::q)) | (1u << int(LoraTarget::v)) | (1u << int(LoraTarget::down)),
                            true),
                 17);
}

// The adapters follow PEFT's names, after the base in each layer (aligned, A Gaussian with
// std 1 / rank, B zero); the base keeps its layout and initial values, so with B = 0 the adapted
// model's loss is the base model's, bit for bit, in fp32 and bf16.
TEST(Model, LoraAdaptersStartAsTheBaseModel) {
  const ModelShape s = lora_shape(), base = tiny_shape();
  const auto units = model_units(s), base_units = model_units(base);
  std::int64_t adapters = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const bool layer = u >= 1 && u + 1 < units.size();
    EXPECT_EQ(units[u].adapters_begin >= 0, layer) << units[u].name;
    for (std::size_t i = 0; i < base_units[u].params.size(); ++i) {
      EXPECT_EQ(units[u].params[i].name, base_units[u].params[i].name);
      EXPECT_EQ(units[u].params[i].offset, base_units[u].params[i].offset);
    }
    for (const auto& p : units[u].params)
      if (p.offset >= units[u].adapters_begin && units[u].adapters_begin >= 0) {
        adapters += p.numel();
        EXPECT_EQ(p.offset % kParamAlignElements, 0) << p.name;
      }
  }
  EXPECT_EQ(adapters, s.adapter_count());
  EXPECT_EQ(units[1].param(".q_proj.lora_A.weight").name, "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ((units[2].param(".down_proj.lora_B.weight").shape), (std::vector<std::int64_t>{s.d_model, 4}));
  EXPECT_EQ((units[2].param(".down_proj.lora_A.weight").shape), (std::vector<std::int64_t>{4, s.d_ff}));

  Batch b(2, 7, s.vocab_size, 3);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    Rig adapted(options(s, p, 2, 7), 11), plain(options(base, p, 2, 7), 11);
    adapted.set(b);
    plain.set(b);
    EXPECT_EQ(adapted.nll_sum(b), plain.nll_sum(b)) << (p == Precision::bf16 ? "bf16" : "fp32");
    const auto a = adapted.host(adapted.params.main_weights(1), adapted.params.numel(1));
    const ParamSpec& A = units[1].param(".q_proj.lora_A.weight");
    const ParamSpec& B = units[1].param(".q_proj.lora_B.weight");
    double sq = 0;
    for (std::int64_t i = 0; i < A.numel(); ++i) sq += double(a[A.offset + i]) * a[A.offset + i];
    EXPECT_NEAR(std::sqrt(sq / A.numel()), 1.0 / 4, 0.05);   // std 1 / rank
    for (std::int64_t i = 0; i < B.numel(); ++i) ASSERT_EQ(a[B.offset + i], 0.0f);
  }
  // With B moved off zero the adapters change the model, and the fp64 reference follows.
  Rig rig(options(s, Precision::fp32, 2, 7), 11);
  rig.randomize_lora_b(13);
  rig.set(b);
  Rig plain(options(base, Precision::fp32, 2, 7), 11);
  plain.set(b);
  const double got = rig.nll_sum(b), want = nll(reference_of(rig), b);
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want));
  EXPECT_GT(std::fabs(got - plain.nll_sum(b)), 1e-3 * std::fabs(want));
}

// LoRA in bf16 against fp32 (adapter gradients: cosine and relative error, as Bf16AgreesWithFp32),
// and with activation recompute bit-identical to without, in both precisions.
TEST(Model, LoraBf16AgreesWithFp32AndRecomputeIsIdentical) {
  const ModelShape s = lora_shape();
  Batch b(2, 9, s.vocab_size, 6);
  std::vector<std::vector<float>> grads[2];
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    Rig plain(options(s, p, 2, 9, true, false), 8), recompute(options(s, p, 2, 9, true, true), 8);
    for (Rig* r : {&plain, &recompute}) {
      r->randomize_lora_b(13);
      r->set(b);
    }
    EXPECT_EQ(plain.step(1.0f / b.count()), recompute.step(1.0f / b.count()));
    for (int u = 0; u < plain.model.unit_count(); ++u) {
      const auto g = plain.host(plain.params.grads(u), plain.params.numel(u));
      EXPECT_EQ(g, recompute.host(recompute.params.grads(u), recompute.params.numel(u))) << "unit " << u;
      grads[p == Precision::bf16].push_back(g);
    }
  }
  for (int u = 1; u + 1 < static_cast<int>(grads[0].size()); ++u) {
    const std::int64_t begin = model_units(s)[u].adapters_begin;
    const std::vector<float> g32(grads[0][u].begin() + begin, grads[0][u].end());
    const std::vector<float> g16(grads[1][u].begin() + begin, grads[1][u].end());
    const GradAgreement a = agreement(g32, g16);
    EXPECT_GT(a.cosine, 0.995) << "unit " << u;   // NaN (an all-zero gradient) fails too
    EXPECT_LT(a.rel_err, 0.1) << "unit " << u;
  }
}

// Mixture-of-experts layers (4 experts, top 2, gates renormalised), with the load-balancing
// loss: every layer MoE with a shared expert, through the grouped path; every second layer MoE,
// through the per-expert loop.
ModelShape moe_shape(int every, bool shared) {
  ModelShape s = tiny_shape();
  s.n_experts = 4;
  s.top_k = 2;
  s.d_ff_expert = 24;
  s.moe_every = every;
  s.shared_expert = shared;
  return s;
}
TEST(Model, GradientsMatchFiniteDifferencesMoeGrouped) { gradient_check(moe_shape(1, true), 5, 0.05f); }
TEST(Model, GradientsMatchFiniteDifferencesMoeLoop) {
  gradient_check(moe_shape(2, false), 6, 0.05f, MoeImpl::loop);
}

// LoRA on MoE models: adapters on the attention of every layer and on the dense layers' MLPs;
// the router, the experts and the shared expert stay frozen (their gradients exactly zero) while
// the adapters' gradients flow through them (against fp64 finite differences, load-balancing
// loss included).
ModelShape moe_lora_shape(int every, bool shared, std::uint32_t targets) {
  ModelShape s = moe_shape(every, shared);
  s.lora = LoraShape{4, 8.0f, targets, false};
  return s;
}
TEST(Model, LoraOnMoeModelsAttentionAdapters) { gradient_check(moe_lora_shape(1, true, 0xf), 13, 0.05f); }
// lora.experts: every expert's gate, up and down carry adapters too (grouped and loop paths).
TEST(Model, LoraOnMoeModelsExpertAdapters) {
  ModelShape s = moe_lora_shape(1, true, 0xf);
  s.lora.experts = true;
  int expert_adapters = 0;
  for (const UnitSpec& u : model_units(s))
    for (const ParamSpec& p : u.params) expert_adapters += p.name.find("mlp.experts.") != std::string::npos &&
                                                           p.name.find(".lora_") != std::string::npos;
  EXPECT_EQ(expert_adapters, s.n_layers * s.n_experts * 3 * 2);
  gradient_check(s, 4, 0.05f);
  gradient_check(s, 4, 0.05f, MoeImpl::loop);
}
TEST(Model, LoraOnMoeModelsDenseLayersMlpAdapters) {
  const ModelShape s = moe_lora_shape(2, false, 0x7f);
  int mlp_adapters = 0;
  for (const UnitSpec& u : model_units(s))
    for (const ParamSpec& p : u.params) mlp_adapters += p.name.find("mlp.gate_proj.lora_A") != std::string::npos;
  EXPECT_EQ(mlp_adapters, 1) << "the dense layer (layer 0 of 2) only";
  gradient_check(s, 10, 0.05f, MoeImpl::loop);
}

TEST(Model, Bf16AgreesWithFp32) {
  ModelShape s = tiny_shape();
  Batch b(2, 9, s.vocab_size, 2);
  Rig f32(options(s, Precision::fp32, 2, 9), 3), b16(options(s, Precision::bf16, 2, 9), 3);
  f32.set(b);
  b16.set(b);
  double l32 = f32.step(1.0f / b.count()), l16 = b16.step(1.0f / b.count());
  EXPECT_NEAR(l16, l32, 2e-2 * l32);   // bf16 activations: ~2^-8 relative per rounding
  for (int u = 0; u < f32.model.unit_count(); ++u) {
    const GradAgreement a = agreement(f32.host(f32.params.grads(u), f32.params.numel(u)),
                                      b16.host(b16.params.grads(u), b16.params.numel(u)));
    EXPECT_GT(a.cosine, 0.995) << "unit " << u;
    EXPECT_LT(a.rel_err, 0.1) << "unit " << u;   // relative gradient error, bf16 tolerance
  }
}

// The tensor-core attention inside the model (GPU builds): a bf16 model with flash attention
// agrees with the fp32 model (GEMM attention) as closely as the bf16 model with GEMM attention
// does, right-padded and packed, at a head dim the kernels take (64) and rows longer than their
// tiles. Recompute and the inference forward take the same path.
TEST(Model, FlashAttentionAgreesWithFp32AndGemmAttention) {
  if (!kernels::flash_attention_available())
    GTEST_SKIP() << "the tensor-core attention exists only in GPU builds (SHARDRL_ENABLE_CUDA)";
  ModelShape s = tiny_shape();
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 64;
  const int B = 3, S = 70;
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "right-padded");
    Batch b(B, S, s.vocab_size, 7);
    if (packed)
      for (int row = 0; row < B; ++row)
        for (int len : {row == 0 ? S : 23, row == 0 ? 0 : S - 23})
          for (int p = 0; p < len; ++p) b.positions.push_back(p);
    ModelOptions o32 = options(s, Precision::fp32, B, S), gemm = options(s, Precision::bf16, B, S);
    ModelOptions flash = gemm, flash_recompute = options(s, Precision::bf16, B, S, true, true);
    flash.attention = flash_recompute.attention = AttentionImpl::flash;
    Rig r32(o32, 3), rg(gemm, 3), rf(flash, 3), rr(flash_recompute, 3);
    for (Rig* r : {&r32, &rg, &rf, &rr}) r->set(b);
    const double l32 = r32.step(1.0f / b.count()), lg = rg.step(1.0f / b.count());
    const double lf = rf.step(1.0f / b.count()), lr = rr.step(1.0f / b.count());
    EXPECT_NEAR(lf, l32, 2e-2 * l32);
    EXPECT_NEAR(lf, lg, 2e-2 * l32);
    EXPECT_EQ(lr, lf) << "recompute runs the same kernels on the same inputs";
    for (int u = 0; u < r32.model.unit_count(); ++u) {
      const auto g32 = r32.host(r32.params.grads(u), r32.params.numel(u));
      const GradAgreement with_gemm = agreement(g32, rg.host(rg.params.grads(u), rg.params.numel(u)));
      const GradAgreement with_flash = agreement(g32, rf.host(rf.params.grads(u), rf.params.numel(u)));
      EXPECT_GT(with_flash.cosine, 0.995) << "unit " << u;
      // Within twice the bf16 GEMM path's own distance from fp32 (plus a floor): attention
      // rounds its probabilities and score gradients to bf16 on both paths.
      EXPECT_LT(with_flash.rel_err, std::max(2 * with_gemm.rel_err, 0.02)) << "unit " << u;
      EXPECT_EQ(rr.host(rr.params.grads(u), rr.params.numel(u)), rf.host(rf.params.grads(u), rf.params.numel(u)))
          << "unit " << u << ": recompute";
    }
  }
}

// cuDNN's attention inside the model (GPU builds with cuDNN): on a batch set without positions
// it runs (its calls counted) and agrees with the fp32 model as the flash kernels do; recompute
// takes the same plans; a batch set with positions, packed or each row one sequence (as the RL
// train phase sets them), goes to the flash kernels, bit for bit.
TEST(Model, CudnnAttentionAgreesWithFp32AndLeavesPackedRowsToFlash) {
  if (!kernels::cudnn_attention_available())
    GTEST_SKIP() << "cuDNN's attention exists only in GPU builds configured with cuDNN (CUDNN_ROOT)";
  ModelShape s = tiny_shape();
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  const int B = 3, S = 70;
  enum class Rows { implicit, explicit_one_sequence, packed };
  for (Rows kind : {Rows::implicit, Rows::explicit_one_sequence, Rows::packed}) {
    SCOPED_TRACE(kind == Rows::implicit ? "no positions" : kind == Rows::packed ? "packed" : "positions 0..S-1");
    const bool packed = kind != Rows::implicit;   // flash's, in the checks below
    Batch b(B, S, s.vocab_size, 9);
    if (kind == Rows::explicit_one_sequence)
      for (int row = 0; row < B; ++row)
        for (int p = 0; p < S; ++p) b.positions.push_back(p);
    if (kind == Rows::packed)
      for (int row = 0; row < B; ++row)
        for (int len : {row == 0 ? S : 31, row == 0 ? 0 : S - 31})
          for (int p = 0; p < len; ++p) b.positions.push_back(p);
    ModelOptions o32 = options(s, Precision::fp32, B, S), flash = options(s, Precision::bf16, B, S);
    ModelOptions cudnn = flash, cudnn_recompute = options(s, Precision::bf16, B, S, true, true);
    flash.attention = AttentionImpl::flash;
    cudnn.attention = cudnn_recompute.attention = AttentionImpl::cudnn;
    Rig r32(o32, 3), rf(flash, 3), rc(cudnn, 3), rr(cudnn_recompute, 3);
    for (Rig* r : {&r32, &rf, &rc, &rr}) r->set(b);
    const double l32 = r32.step(1.0f / b.count()), lf = rf.step(1.0f / b.count());
    const double lc = rc.step(1.0f / b.count()), lr = rr.step(1.0f / b.count());
    EXPECT_EQ(rc.model.cudnn_attention_calls(), packed ? 0 : 2 * s.n_layers) << "one forward, one backward a layer";
    EXPECT_EQ(lr, lc) << "recompute runs the same plans on the same inputs";
    if (packed) {
      EXPECT_EQ(lc, lf) << "batches with positions take the flash kernels";
    }
    EXPECT_NEAR(lc, l32, 2e-2 * l32);
    for (int u = 0; u < r32.model.unit_count(); ++u) {
      const auto g32 = r32.host(r32.params.grads(u), r32.params.numel(u));
      const auto gc = rc.host(rc.params.grads(u), rc.params.numel(u));
      const GradAgreement with_flash = agreement(g32, rf.host(rf.params.grads(u), rf.params.numel(u)));
      const GradAgreement with_cudnn = agreement(g32, gc);
      EXPECT_GT(with_cudnn.cosine, 0.995) << "unit " << u;
      EXPECT_LT(with_cudnn.rel_err, std::max(2 * with_flash.rel_err, 0.02)) << "unit " << u;
      EXPECT_EQ(rr.host(rr.params.grads(u), rr.params.numel(u)), gc) << "unit " << u << ": recompute";
      if (packed) {
        EXPECT_EQ(gc, rf.host(rf.params.grads(u), rf.params.numel(u))) << "unit " << u << ": packed";
      }
    }
  }
}

TEST(Model, FusedAndUnfusedWeightGradientsAgreeAndCountersShowThePath) {
  ModelShape s = tiny_shape();
  Batch b(2, 9, s.vocab_size, 4);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    Rig fused(options(s, p, 2, 9, true), 5), unfused(options(s, p, 2, 9, false), 5);
    fused.set(b);
    unfused.set(b);
    fused.step(1.0f / b.count());
    unfused.step(1.0f / b.count());
    const std::int64_t per_step = 7 * s.n_layers + 1;   // q k v o gate up down per layer + LM head
    EXPECT_EQ(fused.model.wgrad_counters().fused, per_step);
    EXPECT_EQ(fused.model.wgrad_counters().unfused, 0);
    EXPECT_EQ(unfused.model.wgrad_counters().unfused, per_step);
    EXPECT_EQ(unfused.model.wgrad_counters().fused, 0);
    for (int u = 0; u < fused.model.unit_count(); ++u) {
      auto a = fused.host(fused.params.grads(u), fused.params.numel(u));
      auto c = unfused.host(unfused.params.grads(u), unfused.params.numel(u));
      for (std::size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], c[i], 1e-6 + 1e-5 * std::fabs(a[i])) << "unit " << u << " element " << i;
    }
  }
}

// MoE layers: the grouped and the per-expert path give the same loss and gradients, each
// counted on its own path; fusion of the experts' weight gradients is honoured on both (one
// counted weight gradient per expert matrix, on the fused or the unfused path), with and
// without activation recompute.
TEST(Model, MoeGroupedAndLoopAgreeAndCountersShowThePaths) {
  const ModelShape s = moe_shape(1, true);
  Batch b(2, 9, s.vocab_size, 4);
  // Per step: attention q k v o, the router, 3 per expert, the shared expert's 3; the LM head.
  const std::int64_t per_step = (4 + 1 + 3 * s.n_experts + 3) * s.n_layers + 1;
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (bool fusion : {true, false})
      for (bool recompute : {false, true}) {
        ModelOptions og = options(s, p, 2, 9, fusion, recompute), ol = og;
        og.moe_impl = MoeImpl::grouped;
        ol.moe_impl = MoeImpl::loop;
        og.aux_loss_coef = ol.aux_loss_coef = 0.01f;
        Rig grouped(og, 5), loop(ol, 5);
        grouped.set(b);
        loop.set(b);
        const double lg = grouped.step(1.0f / b.count()), ll = loop.step(1.0f / b.count());
        const std::string what = std::string(p == Precision::fp32 ? "fp32" : "bf16") + (fusion ? " fused" : " unfused") +
                                 (recompute ? " recompute" : "");
        EXPECT_NEAR(lg, ll, kDeviceIsGpu ? 1e-3 * std::fabs(ll) : 0.0) << what;
        EXPECT_GT(grouped.model.moe_calls().grouped, 0) << what;
        EXPECT_EQ(grouped.model.moe_calls().loop, 0) << what;
        EXPECT_GT(loop.model.moe_calls().loop, 0) << what;
        EXPECT_EQ(loop.model.moe_calls().grouped, 0) << what;
        for (const Rig* r : {&grouped, &loop}) {
          EXPECT_EQ(r->model.wgrad_counters().fused, fusion ? per_step : 0) << what;
          EXPECT_EQ(r->model.wgrad_counters().unfused, fusion ? 0 : per_step) << what;
        }
        for (int u = 0; u < grouped.model.unit_count(); ++u) {
          auto a = grouped.host(grouped.params.grads(u), grouped.params.numel(u));
          auto c = loop.host(loop.params.grads(u), loop.params.numel(u));
          // The host backend's grouped call is the same products in the same order: bitwise on
          // the CPU. cuBLAS may pick other kernels for a grouped call: on the GPU the unit's
          // gradients agree to rounding, as a whole.
          double diff = 0, norm = 0;
          for (std::size_t i = 0; i < a.size(); ++i) {
            if (!kDeviceIsGpu) {
              ASSERT_EQ(a[i], c[i]) << what << " unit " << u << " element " << i;
            }
            diff += (double(a[i]) - c[i]) * (double(a[i]) - c[i]);
            norm += double(a[i]) * a[i];
          }
          EXPECT_LE(std::sqrt(diff), 1e-2 * std::sqrt(norm)) << what << " unit " << u;
        }
      }
}

TEST(Model, RecomputeGivesIdenticalGradients) {
  ModelShape s = tiny_shape();
  Batch b(2, 9, s.vocab_size, 6);
  Rig plain(options(s, Precision::fp32, 2, 9, true, false), 8), recompute(options(s, Precision::fp32, 2, 9, true, true), 8);
  plain.set(b);
  recompute.set(b);
  EXPECT_EQ(plain.step(1.0f / b.count()), recompute.step(1.0f / b.count()));
  EXPECT_LT(recompute.model.activation_bytes(), plain.model.activation_bytes());
  for (int u = 0; u < plain.model.unit_count(); ++u)
    EXPECT_EQ(plain.host(plain.params.grads(u), plain.params.numel(u)),
              recompute.host(recompute.params.grads(u), recompute.params.numel(u)))
        << "unit " << u;
}

// The head in chunks of 5 tokens (18 tokens: 5, 5, 5, 3; backward recomputes all but the last)
// computes what it computes over the whole batch at once: per-token log-probabilities, the loss
// and every gradient, to rounding: a GEMM of 5 rows may sum in another order than one of 18
// (cuBLAS picks kernels by shape, and so does OpenBLAS for the rows past its kernels' unroll:
// single-threaded on a 2-core CI machine, 5 rows and 18 gave logits a bit apart), which moves a
// logit by its last bit (bf16: 2^-8 relative of logits of size ~0.2), and the head's weight
// gradient sums its chunks' GEMMs instead of one. Its logits buffer holds 5 tokens, not 18.
TEST(Model, ChunkedHeadEqualsWholeBatchHead) {
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "bf16");
    ModelShape s = tiny_shape();
    // A vocabulary whose logits, even 5 tokens' of them, outweigh the layer scratch that shares
    // their memory (Activations::shared), in whole 256-byte blocks: the memory saved is then the
    // logits' alone.
    s.vocab_size = 4096;
    Batch b(2, 9, s.vocab_size, 31);
    ModelOptions whole_options = options(s, p, 2, 9), chunked_options = whole_options;
    chunked_options.logits_chunk_tokens = 5;
    Rig whole(whole_options, 17), chunked(chunked_options, 17);
    whole.set(b);
    chunked.set(b);
    const double whole_loss = whole.step(1.0f / b.count()), chunked_loss = chunked.step(1.0f / b.count());
    const bool fp32 = p == Precision::fp32;
    EXPECT_NEAR(chunked_loss, whole_loss, (fp32 ? 1e-6 : 1e-3) * std::fabs(whole_loss));
    const std::vector<float> whole_logp = whole.host(whole.model.logp(), 18);
    const std::vector<float> chunked_logp = chunked.host(chunked.model.logp(), 18);
    for (int t = 0; t < 18; ++t) {
      EXPECT_NEAR(chunked_logp[t], whole_logp[t], (fp32 ? 1e-5 : 2e-3) * std::max(1.0f, std::fabs(whole_logp[t])))
          << "token " << t;
    }
    EXPECT_EQ(whole.model.activation_bytes() - chunked.model.activation_bytes(),
              std::size_t(18 - 5) * s.vocab_size * whole.model.compute_type_size());
    const double rtol = p == Precision::fp32 ? 1e-5 : 2e-2;
    for (int u = 0; u < whole.model.unit_count(); ++u) {
      const auto w = whole.host(whole.params.grads(u), whole.params.numel(u));
      const auto c = chunked.host(chunked.params.grads(u), chunked.params.numel(u));
      double scale = 0;
      for (float x : w) scale = std::max(scale, double(std::fabs(x)));
      for (std::size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(c[i], w[i], rtol * scale) << "unit " << u << " element " << i;
    }
  }
}

// The logits of a chunked forward are not the batch's: asking for them is a caller's bug.
TEST(ModelDeathTest, LogitsOfAChunkedForwardAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ModelShape s = tiny_shape();
        ModelOptions o = options(s, Precision::fp32, 2, 9);
        o.logits_chunk_tokens = 5;
        Rig rig(o, 17);
        Batch b(2, 9, s.vocab_size, 31);
        rig.set(b);
        rig.nll_sum(b);
        rig.model.logits();
      },
      "computed in chunks");
}

// A layer's forward writes scratch that shares the logits' memory (Activations::shared): the
// logits of the forward before it are gone, and asking for them is refused.
TEST(ModelDeathTest, LogitsAreGoneOnceALayerRunsAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ModelShape s = tiny_shape();
  ModelOptions o = options(s, Precision::fp32, 2, 9);
  Rig rig(o, 17);
  Batch b(2, 9, s.vocab_size, 31);
  rig.set(b);
  rig.nll_sum(b);
  EXPECT_NE(rig.model.logits(), nullptr);   // held: the whole batch's, no layer since
  EXPECT_DEATH(
      {
        rig.model.forward_unit(1, rig.params.compute_weights(1));
        rig.model.logits();
      },
      "a layer's scratch");
}

// Sequences packed into one row compute exactly what they compute alone: attention and RoPE
// restart at every sequence. Per-token log-probabilities and summed gradients must agree.
TEST(Model, PackedSequencesEqualSeparateOnes) {
  ModelShape s = tiny_shape();
  const std::vector<int> lengths = {5, 1, 6};
  const int S = 12;
  Batch packed(1, S, s.vocab_size, 21);
  packed.mask.assign(S, 1.0f);
  for (int len : lengths)
    for (int p = 0; p < len; ++p) packed.positions.push_back(p);
  Rig rig(options(s, Precision::fp32, 1, S), 13);
  rig.set(packed);
  rig.step(1.0f);
  Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> lp(rig.model.logp(), S);
  auto packed_logp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lp);
  std::vector<std::vector<float>> grad_sum;
  for (int u = 0; u < rig.model.unit_count(); ++u) grad_sum.emplace_back(rig.params.numel(u), 0.0f);
  int start = 0;
  for (int len : lengths) {
    Batch alone(1, len, s.vocab_size, 0);
    alone.mask.assign(len, 1.0f);
    std::copy(packed.tokens.begin() + start, packed.tokens.begin() + start + len, alone.tokens.begin());
    std::copy(packed.targets.begin() + start, packed.targets.begin() + start + len, alone.targets.begin());
    Rig one(options(s, Precision::fp32, 1, len), 13);   // same seed: same weights
    one.set(alone);
    one.step(1.0f);
    Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> lp1(one.model.logp(), len);
    auto alone_logp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lp1);
    for (int t = 0; t < len; ++t)
      EXPECT_NEAR(packed_logp(start + t), alone_logp(t), 1e-5 * std::fabs(alone_logp(t))) << "token " << start + t;
    for (int u = 0; u < one.model.unit_count(); ++u) {
      auto g = one.host(one.params.grads(u), one.params.numel(u));
      for (std::size_t i = 0; i < g.size(); ++i) grad_sum[u][i] += g[i];
    }
    start += len;
  }
  for (int u = 0; u < rig.model.unit_count(); ++u) {
    auto g = rig.host(rig.params.grads(u), rig.params.numel(u));
    double scale = 0;
    for (float x : grad_sum[u]) scale = std::max(scale, double(std::fabs(x)));
    for (std::size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], grad_sum[u][i], 1e-5 * scale) << "unit " << u << " element " << i;
  }
}

// Buffers are sized at construction: a step (bf16, so the host GEMMs widen operands) grows
// neither the GEMM workspace nor the activations.
TEST(Model, StepsAllocateNothing) {
  ModelShape s = tiny_shape();
  Batch b(3, 11, s.vocab_size, 8);
  Rig rig(options(s, Precision::bf16, 3, 11, false, true), 4);
  const std::size_t workspace = rig.model.gemm().workspace_bytes(), activations = rig.model.activation_bytes();
  rig.set(b);
  rig.step(1.0f);
  rig.step(1.0f);
  EXPECT_EQ(rig.model.gemm().workspace_bytes(), workspace);
  EXPECT_EQ(rig.model.activation_bytes(), activations);
}

TEST(Model, EveryOptionComesFromTheOneConfig) {
  LoadedConfig l = load_config(
      "[model]\nprecision = \"fp32\"\n[train]\ngradient_accumulation_fusion = false\n"
      "activation_recompute = true\nlogits_chunk_tokens = 7\nmicro_batch_size = 3\nseq_len = 11\n[rollout]\nmax_new_tokens = 8\n",
      "f", {}, this_build());
  ASSERT_TRUE(l.ok());
  ModelOptions o = model_options(l.config);
  EXPECT_EQ(o.precision, Precision::fp32);
  EXPECT_FALSE(o.gradient_accumulation_fusion);
  EXPECT_TRUE(o.activation_recompute);
  EXPECT_EQ(o.logits_chunk_tokens, 7);
  EXPECT_EQ(o.max_batch, 3);
  EXPECT_EQ(o.max_seq_len, 11);
  Transformer m(o, ExecSpace());
  EXPECT_EQ(m.compute_type_size(), sizeof(float));
}

TEST(Model, TinyModelOverfitsOneBatchWithAdamW) {
  ModelShape s = tiny_shape();
  Batch b(4, 16, s.vocab_size, 9);
  Rig rig(options(s, Precision::fp32, 4, 16), 10);
  rig.set(b);
  std::vector<DeviceView<float>> m, v;
  for (int u = 0; u < rig.model.unit_count(); ++u) {
    m.emplace_back("m", rig.params.numel(u));
    v.emplace_back("v", rig.params.numel(u));
  }
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  double loss = 0;
  int step = 0;
  for (step = 1; step <= 300; ++step) {
    loss = rig.step(1.0f / b.count());
    if (loss < 0.05) break;
    for (int u = 0; u < rig.model.unit_count(); ++u)
      adamw_update(ExecSpace(), rig.params.main_weights(u), rig.params.grads(u), m[u].data(), v[u].data(),
                   rig.params.numel(u), hyper, step);
    rig.params.refresh_compute_weights();
  }
  std::printf("overfit: loss %.4f after %d steps\n", loss, step);
  EXPECT_LT(loss, 0.05);
}

}  // namespace
}  // namespace shardrl
