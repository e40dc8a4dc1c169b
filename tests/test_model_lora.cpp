// LoRA in the model: adapter gradients against finite differences (the base frozen), PEFT's names
// and a start equal to the base model, bf16 against fp32 and recompute.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model_test_support.hpp"

namespace shardrl {
namespace {

using namespace model_test;

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


}  // namespace
}  // namespace shardrl
