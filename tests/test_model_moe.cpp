// Mixture-of-experts layers in the model: gradients against finite differences (with the
// load-balancing loss and LoRA), the grouped and per-expert paths agreeing, their counters.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model_test_support.hpp"

namespace shardrl {
namespace {

using namespace model_test;

// Gradients with the load-balancing loss: every layer MoE with a shared expert, through the
// grouped path; every second layer MoE, through the per-expert loop.
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

// An MoE layer's MLP is its experts (and its shared expert): the dense MLP's width d_ff sizes no
// buffer of a model whose every layer is MoE, stored per layer or one set with recompute. With a
// dense layer among them it does.
TEST(Model, MoeLayersKeepNoDenseMlpBuffers) {
  for (bool shared : {false, true})
    for (bool recompute : {false, true}) {
      const std::string what = std::string(shared ? "shared expert" : "no shared expert") +
                               (recompute ? ", recompute" : "");
      auto bytes = [&](int every, int d_ff) {
        ModelShape s = moe_shape(every, shared);
        s.d_ff = d_ff;
        return Transformer(options(s, Precision::bf16, 2, 16, true, recompute), ExecSpace()).activation_bytes();
      };
      const int d_ff = moe_shape(1, shared).d_ff;
      EXPECT_EQ(bytes(1, d_ff), bytes(1, 4 * d_ff)) << what;
      EXPECT_LT(bytes(2, d_ff), bytes(2, 4 * d_ff)) << what;
    }
}

}  // namespace
}  // namespace shardrl
