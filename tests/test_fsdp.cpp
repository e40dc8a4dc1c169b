// The sharded trainer at np 1, 2, 3 and 4 against a single-rank unsharded reference, plus
// micro-batches, reshard on/off, clipping, the non-finite skip, one rank's gathers and reductions
// in place, and use-after-release detection. LoRA, experts, the embedding's rows and the memory
// formulas: test_fsdp_*.cpp.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "fsdp_test_support.hpp"

namespace shardrl {
namespace {

using namespace fsdp_test;

TEST(Fsdp, FiveStepsEqualTheUnshardedReference) {
  for (bool tied : {false, true}) {
    ModelShape s = shape(tied);
    std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 1), GlobalBatch(s.vocab_size, 2)};
    auto want = reference_weights(s, adamw(), 5, batches);
    auto got = sharded_weights(s, checked(), adamw(), 5, batches);
    expect_close(got, want, 1e-5, tied ? "tied" : "untied");
  }
}

// At one rank a unit's slice is the whole unit, so the gather slots are views of the slices: no
// gather memory and no copies. Training, and the reference policy's log-probabilities, give the
// bits of copying into slots of their own (what debug.check_released keeps, so that released
// weights can be poisoned without touching the slices): fp32 and bf16, untied, tied and LoRA.
TEST(Fsdp, OneRankGathersAreViewsOfTheSlices) {
  if (comm().size() != 1) GTEST_SKIP() << "at more than one rank a slice is part of a unit";
  const GlobalBatch b(shape().vocab_size, 9);
  const int rows = kGlobalSequences;
  auto host = [](const float* d, int n) {
    std::vector<float> h(n);
    Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), n),
                      Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(d, n));
    return h;
  };
  for (const char* what : {"fp32", "bf16", "bf16 tied", "bf16 LoRA"}) {
    SCOPED_TRACE(what);
    const std::string name = what;
    ModelShape s = shape(name == "bf16 tied");
    if (name == "bf16 LoRA") s.lora = LoraShape{4, 8.0f, 0x7f};
    const Precision p = name == "fp32" ? Precision::fp32 : Precision::bf16;
    std::vector<std::vector<float>> weights[2], logp[2];
    std::int64_t gather_bytes[2] = {0, 0};
    for (int views = 0; views < 2; ++views) {
      FsdpOptions fo;
      fo.check_released = views == 0;   // slots of their own, poisoned when released
      fo.keep_reference = true;
      const std::int64_t before = MemoryLedger::instance().bytes(MemoryCategory::gather);
      Transformer model(model_opts(s, rows, p), ExecSpace());
      ShardedTrainer trainer(model, comm(), fo, adamw());
      gather_bytes[views] = MemoryLedger::instance().bytes(MemoryCategory::gather) - before;
      trainer.initialize(42, 0.02f);
      trainer.snapshot_reference();
      DeviceView<float> loss("loss", 1);
      for (int step = 0; step < 3; ++step) {
        auto mask = load(model, b, 0, rows);
        trainer.forward_backward(mask.data(), b.scale(), loss.data());
        trainer.optimizer_step();
      }
      for (int u = 0; u < model.unit_count(); ++u) weights[views].push_back(trainer.gather_main_weights(u));
      load(model, b, 0, rows);
      DeviceView<float> out("logp", rows * kS);
      for (WeightSource source : {WeightSource::reference, WeightSource::policy}) {
        trainer.forward_logp(out.data(), source);
        logp[views].push_back(host(out.data(), rows * kS));
      }
    }
    EXPECT_GT(gather_bytes[0], 0);
    EXPECT_EQ(gather_bytes[1], 0) << "views own no memory";
    ASSERT_EQ(weights[0].size(), weights[1].size());
    for (std::size_t u = 0; u < weights[0].size(); ++u) EXPECT_EQ(weights[1][u], weights[0][u]) << "unit " << u;
    EXPECT_EQ(logp[1], logp[0]) << "log-probabilities of the reference, then of the policy";
  }
}

// Each rank's share (24, 12, 8, 6 or 3 sequences at np 1, 2, 3, 4, 8) as
// micro-batches of one sequence equals it as one batch.
TEST(Fsdp, MicroBatchesOfOneEqualOneBatch) {
  ModelShape s = shape();
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 3)};
  const int per_rank = kGlobalSequences / comm().size();
  auto one = sharded_weights(s, checked(), adamw(), 2, batches, 1);
  auto many = sharded_weights(s, checked(), adamw(), 2, batches, per_rank);
  expect_close(many, one, 1e-5, "micro-batches");
}

TEST(Fsdp, ReshardAfterForwardOnAndOffAgree) {
  ModelShape s = shape(true);
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 4)};
  FsdpOptions keep = checked();
  keep.reshard_after_forward = false;
  // The same arithmetic in the same order (the embedding's backward has no atomics): the same bits.
  expect_close(sharded_weights(s, keep, adamw(), 3, batches), sharded_weights(s, checked(), adamw(), 3, batches), 0.0,
               "reshard_after_forward");
}

TEST(Fsdp, ClippingMatchesTheReferenceAndReportsTheNorm) {
  ModelShape s = shape();
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 5)};
  OptimizerOptions tight = adamw();
  tight.clip_grad_norm = 1e-3f;   // far below the gradient norm: every step is clipped
  StepMetrics m;
  auto got = sharded_weights(s, checked(), tight, 2, batches, 1, &m);
  expect_close(got, reference_weights(s, tight, 2, batches), 1e-5, "clipped");
  EXPECT_GT(m.grad_norm, 1e-2f);
  EXPECT_EQ(m.step, 2);
}

TEST(Fsdp, NonFiniteGradientsSkipTheStep) {
  ModelShape s = shape();
  GlobalBatch b(s.vocab_size, 6);
  const int per_rank = kGlobalSequences / comm().size();
  Transformer model(model_opts(s, per_rank), ExecSpace());
  ShardedTrainer trainer(model, comm(), checked(), adamw());
  trainer.initialize(42, 0.02f);
  std::vector<float> before = trainer.gather_main_weights(1);
  DeviceView<float> loss("loss", 1);
  auto mask = load(model, b, comm().rank() * per_rank, per_rank);
  trainer.forward_backward(mask.data(), std::numeric_limits<float>::quiet_NaN(), loss.data());
  trainer.optimizer_step();
  StepMetrics m = trainer.metrics();
  EXPECT_TRUE(m.last_skipped);
  EXPECT_EQ(m.skipped, 1);
  EXPECT_EQ(m.step, 0);
  EXPECT_EQ(trainer.gather_main_weights(1), before);
  // The next, finite step proceeds (gradients were cleared).
  trainer.forward_backward(mask.data(), b.scale(), loss.data());
  trainer.optimizer_step();
  m = trainer.metrics();
  EXPECT_FALSE(m.last_skipped);
  EXPECT_EQ(m.step, 1);
  EXPECT_NE(trainer.gather_main_weights(1), before);
}

// At one rank a reduce-scatter is the identity and the gradient buffers receive in place: the
// slices of a micro-batch's gradients reduced in bf16 are those reduced in fp32 rounded to bf16,
// element for element, for every unit (dense and LoRA, whose adapters' gradients start part way
// into a unit's buffer). Two micro-batches: the second adds to the first. No collective runs.
TEST(Fsdp, OneRankReceivesInPlace) {
  if (comm().size() != 1) GTEST_SKIP() << "one rank's reduce-scatter; the np 2-4 runs hold the others to the reference";
  for (bool lora : {false, true}) {
    ModelShape s = shape();   // untied: each unit reduced once a micro-batch (a tied embedding twice)
    if (lora) s.lora = LoraShape{4, 8.0f, 0x7f};
    const GlobalBatch b(s.vocab_size, 5);
    std::vector<std::vector<float>> slices[2];
    for (GradDtype reduce : {GradDtype::fp32, GradDtype::bf16}) {
      Transformer model(model_opts(s, kGlobalSequences, Precision::bf16), ExecSpace());
      FsdpOptions fo = checked();
      fo.reduce_dtype = reduce;
      ShardedTrainer trainer(model, comm(), fo, adamw());
      trainer.initialize(42, 0.02f);
      DeviceView<float> loss("loss", 1);
      auto mask = load(model, b, 0, kGlobalSequences);
      trainer.forward_backward(mask.data(), b.scale(), loss.data());
      if (reduce == GradDtype::bf16) {
        // Against two fp32 reductions' sum, each rounded: the same micro-batch twice here.
        trainer.forward_backward(mask.data(), b.scale(), loss.data());
      }
      for (int u = 0; u < model.unit_count(); ++u)
        slices[reduce == GradDtype::bf16].push_back(trainer.read_gradient_slice(u));
      EXPECT_EQ(trainer.profile().reduce_scatters, 0) << "the profile counts the collectives that ran: none";
    }
    const char* what = lora ? "LoRA" : "dense";
    double largest = 0;
    for (std::size_t u = 0; u < slices[0].size(); ++u) {
      ASSERT_EQ(slices[0][u].size(), slices[1][u].size()) << what << " unit " << u;
      for (std::size_t i = 0; i < slices[0][u].size(); ++i) {
        const float once = static_cast<float>(bf16(slices[0][u][i]));
        ASSERT_EQ(slices[1][u][i], once + once) << what << " unit " << u << " element " << i;
        largest = std::max(largest, double(std::fabs(once)));
      }
    }
    EXPECT_GT(largest, 0.0) << what << ": some gradient";
  }
}

// A schedule that computes on a unit after releasing it stops with an error (the slot's
// generation moved on; its contents are NaN).
TEST(Fsdp, UseAfterReleaseIsCaught) {
  if (comm().size() != 1) GTEST_SKIP() << "death tests fork; run at np 1";
  ModelShape s = shape();
  GlobalBatch b(s.vocab_size, 7);
  Transformer model(model_opts(s, kGlobalSequences), ExecSpace());
  ShardedTrainer trainer(model, comm(), checked(), adamw());
  trainer.initialize(42, 0.02f);
  DeviceView<float> loss("loss", 1);
  auto mask = load(model, b, 0, kGlobalSequences);
  trainer.forward_backward(mask.data(), b.scale(), loss.data());
  EXPECT_DEATH(
      {
        set_job_abort(nullptr);   // the forked child must not take the MPI job down
        trainer.forward_with_stale_handle_for_test(2);
      },
      "forward of unit 2 uses weights that were released");
}

}  // namespace
}  // namespace shardrl
