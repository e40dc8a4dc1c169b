// The GPU attention inside the model: the flash kernels and cuDNN against the fp32 model and the
// GEMM attention (skipped on builds without them).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"
#include "model_test_support.hpp"

namespace shardrl {
namespace {

using namespace model_test;

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


}  // namespace
}  // namespace shardrl
