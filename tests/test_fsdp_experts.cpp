// Mixture-of-experts models sharded with the rest or by expert parallelism (each rank keeping its
// experts whole) against the unsharded reference, and the expert-parallel layout.
#include <gtest/gtest.h>

#include <string>

#include "fsdp_test_support.hpp"

namespace shardrl {
namespace {

using namespace fsdp_test;

// A mixture-of-experts model (every layer: 4 experts, top 2, a shared expert) sharded, with
// released weights poisoned, resharding after forward and micro-batches, through both expert GEMM
// paths (grouped and the per-expert loop), against the unsharded reference through the grouped
// path. (No load-balancing loss: it is
// not a sum over tokens, so splitting the batch changes it; the model test checks its gradient.)
TEST(Fsdp, MixtureOfExpertsEqualsTheUnshardedReference) {
  ModelShape s = moe_shape(4);
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 5), GlobalBatch(s.vocab_size, 6)};
  const int per_rank = kGlobalSequences / comm().size();
  const int micro = per_rank % 2 == 0 ? 2 : per_rank;
  auto want = reference_weights(s, adamw(), 3, batches);
  for (MoeImpl impl : {MoeImpl::grouped, MoeImpl::loop}) {
    auto got = sharded_weights(s, checked(), adamw(), 3, batches, micro, nullptr, impl);
    expect_close(got, want, 1e-5, impl == MoeImpl::grouped ? "mixture of experts, grouped" : "mixture of experts, loop");
  }
}

// Expert parallelism: each rank keeps 8 / W experts whole and the routed rows travel to them
// (W = 1, 2, 4, 8; not 3). Against the same unsharded reference, with released weights poisoned
// (the other ranks' experts are never gathered), micro-batches, resharding on and off, both GEMM
// paths, activation recompute; and the slices hold exactly this rank's experts.
TEST(Fsdp, ExpertParallelEqualsTheUnshardedReference) {
  ModelShape s = moe_shape(8);
  if (s.n_experts % comm().size() != 0) GTEST_SKIP() << "8 experts do not divide among " << comm().size() << " ranks";
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 7), GlobalBatch(s.vocab_size, 8)};
  const int per_rank = kGlobalSequences / comm().size();
  auto want = reference_weights(s, adamw(), 3, batches);
  for (MoeImpl impl : {MoeImpl::grouped, MoeImpl::loop})
    for (bool reshard : {true, false}) {
      FsdpOptions fo = checked();
      fo.expert_parallel = true;
      fo.reshard_after_forward = reshard;
      auto got = sharded_weights(s, fo, adamw(), 3, batches, per_rank % 2 == 0 ? 2 : 1, nullptr, impl);
      expect_close(got, want, 1e-5, impl == MoeImpl::grouped ? "expert parallel, grouped" : "expert parallel, loop");
    }
  {   // with activation recompute: every layer's forward, exchanges included, runs again in backward
    FsdpOptions fo = checked();
    fo.expert_parallel = true;
    auto got = sharded_weights(s, fo, adamw(), 3, batches, 1, nullptr, MoeImpl::grouped, true);
    expect_close(got, want, 1e-5, "expert parallel, recompute");
  }
  // The layout: a MoE unit's slice is 1 / W of its dense part and this rank's experts whole.
  Transformer model(model_opts(s, 1), ExecSpace());
  const ShardLayout layout(model.units(), comm().size(), comm().rank(), true);
  const UnitSpec& layer = model.units()[1];
  const UnitShard& u = layout.unit(1);
  ASSERT_TRUE(u.expert_parallel());
  EXPECT_EQ(u.dense * comm().size(), layer.experts_begin);
  EXPECT_EQ((u.shard - u.dense) * comm().size(), layer.numel - layer.experts_begin);
  // A gather holds the dense part and this rank's experts only.
  EXPECT_EQ(u.gathered, layer.experts_begin + (layer.numel - layer.experts_begin) / comm().size());
  const int mine = s.n_experts / comm().size();
  for (int e = 0; e < s.n_experts; ++e) {
    const ParamOverlap o = layout.overlap(1, layer.param(".experts." + std::to_string(e) + ".down_proj.weight"));
    const bool own = e / mine == comm().rank();
    EXPECT_EQ(o.count, own ? std::int64_t(s.d_model) * s.d_ff_expert : 0) << "expert " << e;
  }
}

}  // namespace
}  // namespace shardrl
