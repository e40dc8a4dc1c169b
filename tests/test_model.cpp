// The whole model on one rank: parameter layout, fresh loss, the forward and gradients against the
// fp64 reference (finite differences), bf16 against fp32, the two weight-gradient paths, activation
// recompute, packed sequences, no allocation in a step, and a tiny model overfitting one batch.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/memory_ledger.hpp"
#include "device_allocation_counter.hpp"
#include "model_test_support.hpp"
#include "optim/adamw.hpp"

namespace shardrl {
namespace {

using namespace model_test;

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

// Weights large enough (std 0.4, as in the RoPE test) that the layers move every token's
// log-probability far from uniform's -ln V: a bf16 forward that dropped a layer or flattened the
// logits would then be far from fp32's, where at std 0.02 every model sits within 0.05 of ln V.
TEST(Model, Bf16AgreesWithFp32) {
  ModelShape s = tiny_shape();
  Batch b(2, 9, s.vocab_size, 2);
  Rig f32(options(s, Precision::fp32, 2, 9), 3, 0.4f), b16(options(s, Precision::bf16, 2, 9), 3, 0.4f);
  f32.set(b);
  b16.set(b);
  double l32 = f32.step(1.0f / b.count()), l16 = b16.step(1.0f / b.count());
  const int n = b.B * b.S;
  auto logp = [n](Rig& r) {
    return Kokkos::create_mirror_view_and_copy(
        Kokkos::HostSpace(),
        Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(r.model.logp(), n));
  };
  const auto lp32 = logp(f32), lp16 = logp(b16);
  const double uniform = -std::log(double(s.vocab_size));
  double moved = 0, worst = 0;
  for (int i = 0; i < n; ++i) {
    moved += std::fabs(lp32(i) - uniform) / n;
    worst = std::max(worst, std::fabs(double(lp16(i)) - lp32(i)));
  }
  ASSERT_GT(moved, 1.0) << "the weights must move the log-probabilities for the comparison to mean anything";
  // bf16 activations round to ~2^-8 relative at every step of the forward: measured on the CPU,
  // the loss moves 0.03 (of 2.5 from ln V) and the worst token 0.11 (of 3.5 on average).
  EXPECT_NEAR(l16, l32, 0.03 * std::fabs(l32 + uniform));
  EXPECT_LT(worst, 0.1 * moved);
  for (int u = 0; u < f32.model.unit_count(); ++u) {
    const GradAgreement a = agreement(f32.host(f32.params.grads(u), f32.params.numel(u)),
                                      b16.host(b16.params.grads(u), b16.params.numel(u)));
    EXPECT_GT(a.cosine, 0.995) << "unit " << u;
    EXPECT_LT(a.rel_err, 0.1) << "unit " << u;   // relative gradient error, bf16 tolerance
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

// Buffers are sized at construction: once the batch is set, a step (bf16, so the host GEMMs
// widen operands) allocates nothing in the device memory space, grows no GEMM workspace and
// leaves the ledger as it was.
TEST(Model, StepsAllocateNothing) {
  ModelShape s = tiny_shape();
  Batch b(3, 11, s.vocab_size, 8);
  Rig rig(options(s, Precision::bf16, 3, 11, false, true), 4);
  const std::size_t workspace = rig.model.gemm().workspace_bytes();
  rig.set(b);
  rig.step(1.0f);   // the first step may set up what a later step reuses
  const std::int64_t ledger = MemoryLedger::instance().total();
  test::DeviceAllocationCounter allocations;
  rig.step(1.0f);
  rig.step(1.0f);
  EXPECT_EQ(allocations.count(), 0u) << allocations.describe();
  EXPECT_EQ(rig.model.gemm().workspace_bytes(), workspace);
  EXPECT_EQ(MemoryLedger::instance().total(), ledger);
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

// model.attention's "auto" on every kind of build, whichever this one is: cuDNN where built, else
// the flash kernels, only for bf16 and head dims 64 and 128; the named choices as named.
TEST(Model, AttentionAutoTakesTheFusedKernelsOnlyWhereTheyRun) {
  const AttentionKernels cpu{false, false}, gpu{true, false}, gpu_cudnn{true, true};
  const auto automatic = [](Precision p, int head_dim, const AttentionKernels& k) {
    return resolve_attention(AttentionChoice::automatic, p, head_dim, k);
  };
  for (int hd : {64, 128}) {
    EXPECT_EQ(automatic(Precision::bf16, hd, cpu), AttentionImpl::gemm) << hd;
    EXPECT_EQ(automatic(Precision::bf16, hd, gpu), AttentionImpl::flash) << hd;
    EXPECT_EQ(automatic(Precision::bf16, hd, gpu_cudnn), AttentionImpl::cudnn) << hd;
    EXPECT_EQ(automatic(Precision::fp32, hd, gpu_cudnn), AttentionImpl::gemm) << hd;
  }
  for (int hd : {32, 96, 256}) EXPECT_EQ(automatic(Precision::bf16, hd, gpu_cudnn), AttentionImpl::gemm) << hd;
  for (const AttentionKernels& k : {cpu, gpu, gpu_cudnn}) {
    EXPECT_EQ(resolve_attention(AttentionChoice::gemm, Precision::bf16, 64, k), AttentionImpl::gemm);
    EXPECT_EQ(resolve_attention(AttentionChoice::flash, Precision::bf16, 64, k), AttentionImpl::flash);
    EXPECT_EQ(resolve_attention(AttentionChoice::cudnn, Precision::bf16, 64, k), AttentionImpl::cudnn);
  }
  // This build's own kernels are what model_options resolves with.
  LoadedConfig l = load_config("[model]\nprecision = \"bf16\"\n", "f", {}, this_build());
  ASSERT_TRUE(l.ok()) << l.errors.front();
  const ModelOptions o = model_options(l.config);
  EXPECT_EQ(o.attention, resolve_attention(AttentionChoice::automatic, Precision::bf16, o.shape.head_dim,
                                           AttentionKernels::of_this_build()));
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
