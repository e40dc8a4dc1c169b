// The sharded trainer's memory: the gradient buffers sized for the units that use them, and the
// persistent bytes exactly the sharded state.
#include <gtest/gtest.h>

#include "fsdp_test_support.hpp"

namespace shardrl {
namespace {

using namespace fsdp_test;

// The gradient buffers of backward (full-unit, then reduce-scattered into a slice): two of each,
// the second sized for the largest decoder layer, tied head or not (the vocabulary-sized
// embedding and untied head take the first; a tied head's own gradient, its final norm's, takes
// the second while the embedding's takes the first), a bf16 copy of each where reduced in bf16,
// and a receive slice of each but at one rank, where they receive in place; at one rank with
// fp32 reduction none at all (backward writes the persistent slices). Sized from the layout: the
// same workspace bytes on every device. (FiveStepsEqualTheUnshardedReference holds the tied
// head's buffers, and at np 1 the gradients written into the slices, to the unsharded
// gradients.)
TEST(Fsdp, GradientBuffersAreSizedForTheUnitsThatUseThem) {
  for (GradDtype reduce : {GradDtype::fp32, GradDtype::bf16})
    for (bool tied : {false, true}) {
      ModelShape s = shape(tied);
      s.vocab_size = 4096;   // the embedding well above a layer, as in real models
      const std::int64_t before = MemoryLedger::instance().bytes(MemoryCategory::workspace);
      Transformer model(model_opts(s, 2, Precision::bf16), ExecSpace());
      const std::int64_t model_workspace = MemoryLedger::instance().bytes(MemoryCategory::workspace) - before;
      const std::int64_t optimizer_workspace = [] {   // its device scalars (step, lr, norm, ...)
        const std::int64_t at = MemoryLedger::instance().bytes(MemoryCategory::workspace);
        Optimizer alone(adamw(), ExecSpace());
        return MemoryLedger::instance().bytes(MemoryCategory::workspace) - at;
      }();
      FsdpOptions fo = checked();
      fo.reduce_dtype = reduce;
      ShardedTrainer trainer(model, comm(), fo, adamw());
      const ShardLayout& l = trainer.layout();
      std::int64_t layer = 0;
      for (int u = 1; u < l.unit_count() - 1; ++u) layer = std::max(layer, l.unit(u).padded);
      ASSERT_GT(l.max_padded(), 2 * layer) << "the test needs a vocabulary larger than a layer";
      const int ranks = comm().size();
      const bool bf16_reduce = reduce == GradDtype::bf16;
      const std::int64_t both = l.max_padded() + layer;
      // The full-unit buffers, and their bf16 copies; none at one rank with fp32 reduction.
      const std::int64_t full = ranks == 1 && !bf16_reduce ? 0 : (bf16_reduce ? 4 + 2 : 4) * both;
      // The receive buffers (a slice of each): none at one rank, where the buffers receive in place.
      const std::int64_t receive = ranks > 1 ? (bf16_reduce ? 2 : 4) * both / ranks : 0;
      // The embedding's lookup as every rank's rows (2 x kS tokens each) and their ids.
      const std::int64_t lookup = lookup_as_rows(ranks, 2 * kS, s.vocab_size) ? 4 * ranks * 2 * kS * (s.d_model + 1) : 0;
      EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::workspace) - before - model_workspace - optimizer_workspace,
                full + receive + lookup)
          << (tied ? "tied" : "untied") << (bf16_reduce ? ", bf16 reduction" : ", fp32 reduction");
    }
}

// Persistent bytes per rank are exactly the sharded state: per parameter 4 (fp32 main) + 2
// (bf16 own copy) + 4 (grad) + 4 + 4 (Adam) = 18 bytes, or 4 + 2 + 2 + 2 + 2 = 12 with bf16
// gradients and moments; over the slices, which cover every parameter plus padding.
TEST(Fsdp, PersistentMemoryIsTheShardedStateAndNothingElse) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  for (GradDtype dt : {GradDtype::fp32, GradDtype::bf16}) {
    const std::int64_t before = MemoryLedger::instance().persistent();
    const std::int64_t weights_before = MemoryLedger::instance().bytes(MemoryCategory::weights);
    Transformer model(model_opts(s, 2, Precision::bf16), ExecSpace());
    FsdpOptions fo = checked();
    fo.main_grad_dtype = dt;
    fo.state_dtype = dt;
    ShardedTrainer trainer(model, comm(), fo, adamw());
    const ShardLayout& l = trainer.layout();
    const std::int64_t per_param = dt == GradDtype::fp32 ? 18 : 12;
    EXPECT_EQ(MemoryLedger::instance().persistent() - before, per_param * l.total_shard());
    EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::weights) - weights_before, 6 * l.total_shard())
        << "weights: fp32 main + bf16 own copy of the slice, no other master copy";
    // The slices cover the parameters; the padding is bounded by the alignment rules.
    std::int64_t padded = 0, numel = 0;
    for (int u = 0; u < l.unit_count(); ++u) {
      padded += l.unit(u).padded;
      numel += l.unit(u).numel;
      EXPECT_EQ(l.unit(u).padded % (comm().size() * kParamAlignElements), 0);
      EXPECT_LT(l.unit(u).padded - l.unit(u).numel, comm().size() * kParamAlignElements);
    }
    EXPECT_EQ(l.total_shard() * comm().size(), padded);
    EXPECT_GE(numel, s.parameter_count());
  }
}

}  // namespace
}  // namespace shardrl
