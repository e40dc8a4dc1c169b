// The embedding's lookup and gradient exchanged as rows of the ranks' tokens or as the whole
// table: equal to the unsharded reference, the gather's bits, and bf16 rows rounded once.
#include <gtest/gtest.h>

#include <string>

#include "fsdp_test_support.hpp"

namespace shardrl {
namespace {

using namespace fsdp_test;

// The embedding's lookup goes between ranks as rows of the ranks' tokens where all ranks' rows
// are fewer than the vocabulary (a model with room for a row more than each rank's batch:
// 234-252 tokens against 259), and as the table where they are not (against 200): in forward
// each rank's part of every rank's rows from its slice, reduce-scattered, instead of gathering
// the table; in backward the embedding's own gradient, nonzero only in the rows of the batch's
// tokens, as those rows instead of a reduce-scatter of the table's. Either way the training
// equals the unsharded reference's, tied head or not (with released weights poisoned, so a read
// of an embedding never gathered would show); the profile says which ran: a micro-batch
// reduce-scatters each unit (and a tied head's share of the embedding), or with rows the
// forward's rows in place of the embedding's own gradient, and times the rows' exchanges apart.
TEST(Fsdp, EmbeddingGradientAsRowsOrReduceScatterEqualsTheReference) {
  for (int vocab : {259, 200})
    for (bool tied : {false, true}) {
      ModelShape s = shape(tied);
      s.vocab_size = vocab;
      const std::vector<GlobalBatch> batches = {GlobalBatch(vocab, 11), GlobalBatch(vocab, 12)};
      const auto want = reference_weights(s, adamw(), 3, batches);
      StepProfile profile;
      FsdpOptions timed = checked();
      timed.profile = true;   // phases fenced and timed: the same arithmetic
      const auto got = sharded_weights(s, timed, adamw(), 3, batches, 1, nullptr, MoeImpl::grouped, false, &profile, 1);
      const std::string what = std::to_string(vocab) + (tied ? " tied" : " untied");
      expect_close(got, want, 1e-5, what.c_str());
      const int ranks = comm().size(), units = static_cast<int>(model_units(s).size());
      const bool rows = lookup_as_rows(ranks, (kGlobalSequences / ranks + 1) * kS, vocab);
      EXPECT_EQ(rows, ranks > 1 && vocab == 259) << what;
      // The rows' exchanges are timed apart, as part of the collectives' time.
      if (rows) EXPECT_GT(profile.lookup_s, 0.0) << what;
      else EXPECT_EQ(profile.lookup_s, 0.0) << what;
      if (ranks > 1) {
        // With rows the forward's reduce-scatter takes the place of the embedding's own.
        EXPECT_EQ(profile.reduce_scatters, 3 * (units + (tied ? 1 : 0))) << what;
        const ShardLayout layout(model_units(s), ranks, comm().rank());
        std::int64_t step_bytes = 0;   // fp32 everywhere
        for (int u = 0; u < units; ++u) step_bytes += 4 * layout.unit(u).shard * ranks;
        const std::int64_t embedding = 4 * layout.unit(0).shard * ranks;
        const std::int64_t capacity = (kGlobalSequences / ranks + 1) * kS;   // the model's tokens per forward
        if (tied) step_bytes += embedding;
        if (rows) step_bytes += 4 * ranks * capacity * s.d_model - embedding;
        EXPECT_EQ(profile.reduce_scatter_bytes, 3 * step_bytes) << what;
      }
    }
}

// The embedding looked up from the slices has the gather's bits: two bf16 models that differ
// only in their room for tokens, one with all ranks' room under the vocabulary (rows) and one
// over it (the table gathered), give the same log-probabilities, bit for bit, of the initial
// policy and, after a step, of the reference (each element of the rows' sum has one nonzero
// term). The reference after the step is the initial policy, and differs from the new one.
TEST(Fsdp, EmbeddingLookedUpFromSlicesHasTheGathersBits) {
  const int ranks = comm().size(), rows = kGlobalSequences / ranks;
  if (ranks == 1) GTEST_SKIP() << "one rank: nothing to exchange";
  auto host = [](const float* d, int n) {
    std::vector<float> h(n);
    Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), n),
                      Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(d, n));
    return h;
  };
  for (bool tied : {false, true}) {
    ModelShape s = shape(tied);
    s.vocab_size = 259;
    const GlobalBatch b(s.vocab_size, 14);
    // Room for this rank's rows (all ranks': 216 tokens), and for enough that all ranks' reach 259.
    const int table_rows = (s.vocab_size + ranks * kS - 1) / (ranks * kS);
    ASSERT_TRUE(lookup_as_rows(ranks, std::int64_t(rows) * kS, s.vocab_size));
    ASSERT_FALSE(lookup_as_rows(ranks, std::int64_t(table_rows) * kS, s.vocab_size));
    std::vector<float> policy[2], reference[2], stepped[2];
    std::int64_t forward_reduce_bytes[2] = {0, 0}, forward_gather_bytes[2] = {0, 0};
    for (int form = 0; form < 2; ++form) {   // 0: rows, 1: the table
      Transformer model(model_opts(s, form == 0 ? rows : table_rows, Precision::bf16), ExecSpace());
      FsdpOptions fo = checked();
      fo.keep_reference = true;
      ShardedTrainer trainer(model, comm(), fo, adamw());
      trainer.initialize(42, 0.02f);
      trainer.snapshot_reference();
      DeviceView<float> out("logp", rows * kS), loss("loss", 1);
      load(model, b, comm().rank() * rows, rows);
      const StepProfile before = trainer.profile();
      trainer.forward_logp(out.data(), WeightSource::policy);
      forward_reduce_bytes[form] = trainer.profile().reduce_scatter_bytes - before.reduce_scatter_bytes;
      forward_gather_bytes[form] = trainer.profile().all_gather_bytes - before.all_gather_bytes;
      policy[form] = host(out.data(), rows * kS);
      auto mask = load(model, b, comm().rank() * rows, rows);
      trainer.forward_backward(mask.data(), b.scale(), loss.data());
      trainer.optimizer_step();
      load(model, b, comm().rank() * rows, rows);
      trainer.forward_logp(out.data(), WeightSource::reference);
      reference[form] = host(out.data(), rows * kS);
      trainer.forward_logp(out.data(), WeightSource::policy);
      stepped[form] = host(out.data(), rows * kS);
    }
    const char* what = tied ? "tied" : "untied";
    EXPECT_EQ(forward_reduce_bytes[0], std::int64_t(2) * ranks * rows * kS * s.d_model) << what << ": the rows, in bf16";
    EXPECT_EQ(forward_reduce_bytes[1], 0) << what << ": the table gathered, nothing reduced in forward";
    // Every unit gathered once in bf16, the table only for a tied head, or also at the start,
    // where the rows take its place with every rank's token ids.
    const ShardLayout layout(model_units(s), ranks, comm().rank());
    std::int64_t layers_and_head = 0;
    for (int u = 1; u < layout.unit_count(); ++u) layers_and_head += 2 * layout.unit(u).shard * ranks;
    const std::int64_t table = 2 * layout.unit(0).shard * ranks, head_table = tied ? table : 0;
    EXPECT_EQ(forward_gather_bytes[0], layers_and_head + head_table + std::int64_t(4) * ranks * rows * kS) << what;
    EXPECT_EQ(forward_gather_bytes[1], layers_and_head + head_table + table) << what;
    EXPECT_EQ(policy[0], policy[1]) << what << ": the initial policy";
    EXPECT_EQ(reference[0], reference[1]) << what << ": the reference after a step";
    EXPECT_EQ(reference[0], policy[0]) << what << ": the reference is the initial policy";
    EXPECT_NE(stepped[0], policy[0]) << what << ": the step moved the policy";
  }
}

// Reduced in bf16, the embedding's rows are summed in fp32 and rounded once: its gradient slice
// is the fp32 reduction's rounded to bf16, bit for bit (a bf16 reduce-scatter would round each
// rank's share before summing).
TEST(Fsdp, EmbeddingRowsReducedInBf16RoundOnce) {
  ModelShape s = shape();   // untied: the embedding's gradient is its lookup's alone
  const int ranks = comm().size(), rows = kGlobalSequences / ranks;
  if (!lookup_as_rows(ranks, rows * kS, s.vocab_size)) GTEST_SKIP() << "one rank: nothing to exchange";
  const GlobalBatch b(s.vocab_size, 13);
  std::vector<float> slice[2];
  for (GradDtype reduce : {GradDtype::fp32, GradDtype::bf16}) {
    Transformer model(model_opts(s, rows), ExecSpace());
    FsdpOptions fo = checked();
    fo.reduce_dtype = reduce;
    ShardedTrainer trainer(model, comm(), fo, adamw());
    trainer.initialize(42, 0.02f);
    DeviceView<float> loss("loss", 1);
    auto mask = load(model, b, comm().rank() * rows, rows);
    trainer.forward_backward(mask.data(), b.scale(), loss.data());
    slice[reduce == GradDtype::bf16] = trainer.read_gradient_slice(0);
  }
  ASSERT_EQ(slice[0].size(), slice[1].size());
  long nonzero = 0;
  for (std::size_t i = 0; i < slice[0].size(); ++i) {
    ASSERT_EQ(slice[1][i], static_cast<float>(bf16(slice[0][i]))) << "element " << i;
    nonzero += slice[0][i] != 0.0f;
  }
  EXPECT_GT(nonzero, 0) << "this rank's slice holds some of the batch's tokens";
}

}  // namespace
}  // namespace shardrl
