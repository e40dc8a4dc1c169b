// The train step captured as a CUDA graph (train.cuda_graph = "full", DESIGN.md invariant 3) at
// np 1 and 2: replayed steps end bit-identical to eager steps from the same state and inputs;
// the trainer's buffers keep their addresses; a bucket is captured once and replayed across
// steps, after a checkpoint's state is written back, and into a fresh trainer that loads it.
// On GPU builds the graphs are CUDA graphs; on CPU builds (no graphs) the same schedule runs
// through host replay, which tests the staging of the micro-batches' inputs.
#include <gtest/gtest.h>

#include <random>

#include "flash_attention_shape.hpp"
#include "fsdp/train_step_graphs.hpp"
#include "job/options.hpp"
#include "job/policy.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl {
namespace {

constexpr int kRows = 3, kS = 7, kMicro = 2, kSteps = 10;

Communicator& comm() {
  static std::unique_ptr<Communicator> c = make_communicator(
      has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD, 120.0);
  return *c;
}

// The job these tests step: the tiny model, kRows x kS micro-batches, clipping active (the clip
// scale comes from the device), a cosine schedule; gradients and moments in `dtype`.
// With `flash`, a custom shape whose head dim the tensor-core attention takes (GPU builds).
// With `lora`, rank-4 adapters on every linear layer over the frozen base.
Config config(Precision p, bool reshard, GradDtype dtype = GradDtype::fp32, bool flash = false, bool lora = false,
              bool cudnn = false) {
  Config c;
  if (lora) {
    c.lora.rank = 4;
    c.lora.alpha = 8.0;
  }
  if (flash || cudnn) {
    use_flash_attention_shape(c);
    c.model.attention = cudnn ? AttentionChoice::cudnn : AttentionChoice::flash;
  }
  c.run.seed = 7;
  c.model.precision = p;
  c.train.micro_batch_size = kRows;
  c.train.seq_len = kS;
  c.fsdp.reshard_after_forward = reshard;
  c.fsdp.main_grad_dtype = dtype;
  c.optim.state_dtype = dtype;
  c.optim.lr = 1e-3;
  c.optim.weight_decay = 0.01;
  c.optim.warmup_steps = 3;
  c.optim.schedule = LrSchedule::cosine;
  c.optim.decay_steps = 20;
  c.optim.clip_grad_norm = 0.5;
  return c;
}

// Everything a trainer holds, as fp32 on the host, and its counters.
struct State {
  std::vector<std::vector<float>> slices;
  StepMetrics metrics;
  bool operator==(const State& o) const {
    return slices == o.slices && metrics.step == o.metrics.step && metrics.lr == o.metrics.lr &&
           metrics.grad_norm == o.metrics.grad_norm && metrics.skipped == o.metrics.skipped;
  }
};

State state_of(ShardedTrainer& t) {
  State s;
  for (int u = 0; u < t.layout().unit_count(); ++u)
    for (SliceState k : {SliceState::main, SliceState::exp_avg, SliceState::exp_avg_sq})
      s.slices.push_back(t.read_slice(u, k));
  s.metrics = t.metrics();
  return s;
}

void restore(ShardedTrainer& t, const State& s) {
  std::size_t i = 0;
  for (int u = 0; u < t.layout().unit_count(); ++u)
    for (SliceState k : {SliceState::main, SliceState::exp_avg, SliceState::exp_avg_sq}) t.write_slice(u, k, s.slices[i++]);
  t.set_step_counters(s.metrics.step, s.metrics.skipped, s.metrics.schedule_start);
}

// One policy built by the job layer, its objective's mask and the step graphs (or none: eager).
struct Job {
  Policy policy;
  Transformer& model;
  ShardedTrainer& trainer;
  DeviceView<float> mask{"mask", kRows * kS}, loss{"loss", 1};
  MaskedNll objective{mask.data(), 1.0f, loss.data()};
  std::unique_ptr<TrainStepGraphs> graphs;

  Job(Precision p, bool graphed, bool reshard = true, GradDtype dtype = GradDtype::fp32, bool flash = false,
      bool lora = false, bool cudnn = false)
      : policy(config(p, reshard, dtype, flash, lora, cudnn), comm()), model(policy.model()),
        trainer(policy.trainer()) {
    if (graphed)
      graphs = std::make_unique<TrainStepGraphs>(trainer, model,
                                                 std::vector<DeviceRegion>{{mask.data(), mask.extent(0) * sizeof(float)}},
                                                 kMicro, !CapturedGraph::native());
  }

  // Step `step`'s inputs: different tokens, targets and weights per step, micro-batch and rank.
  void set_inputs(int step, int m) {
    std::mt19937 gen(static_cast<unsigned>(1000 * step + 10 * m + comm().rank()));
    std::uniform_int_distribution<int> tok(0, model.options().shape.vocab_size - 1);
    std::uniform_real_distribution<float> w(0.0f, 0.05f);
    std::vector<std::int32_t> tokens(kRows * kS), targets(kRows * kS);
    for (auto& t : tokens) t = tok(gen);
    for (auto& t : targets) t = tok(gen);
    model.set_batch(tokens.data(), targets.data(), kRows, kS);
    auto h = Kokkos::create_mirror_view(mask);
    for (int i = 0; i < kRows * kS; ++i) h(i) = (i % 5 == 4) ? 0.0f : w(gen);
    Kokkos::deep_copy(mask, h);
  }

  void step(int step, int micro = kMicro) {
    for (int m = 0; m < micro; ++m) {
      set_inputs(step, m);
      if (graphs) graphs->stage(m);
      else trainer.forward_backward(objective);
    }
    if (graphs) graphs->step("test", micro, objective);
    else trainer.optimizer_step();
  }
};

// The compute precision and the element type of the gradient slices and Adam moments. bf16 with
// bf16 gradients and moments is the exact case of the CUDA-graph failure in the upstream stacks.
struct Numerics {
  Precision precision;
  GradDtype state;
  bool flash = false;   // the tensor-core attention kernels inside the captured step
  bool lora = false;    // LoRA adapters over a frozen base: only they are reduced and stepped
  bool cudnn = false;   // cuDNN's fused attention inside the captured step
};

class StepGraphs : public ::testing::TestWithParam<Numerics> {};

TEST_P(StepGraphs, ReplayedStepsEqualEagerSteps) {
  // The bucket's first step runs eagerly; then 10 steps replayed from the graph.
  const Numerics n = GetParam();
  if (n.flash && !kernels::flash_attention_available())
    GTEST_SKIP() << "the tensor-core attention exists only in GPU builds (SHARDRL_ENABLE_CUDA)";
  if (n.cudnn && !kernels::cudnn_attention_available())
    GTEST_SKIP() << "cuDNN's attention exists only in GPU builds configured with cuDNN (CUDNN_ROOT)";
  Job eager(n.precision, false, true, n.state, n.flash, n.lora, n.cudnn),
      graphed(n.precision, true, true, n.state, n.flash, n.lora, n.cudnn);
  ASSERT_EQ(graphed.trainer.lora(), n.lora);
  ASSERT_EQ(graphed.model.options().attention,
            n.cudnn ? AttentionImpl::cudnn : n.flash ? AttentionImpl::flash : AttentionImpl::gemm);
  ASSERT_EQ(graphed.trainer.options().main_grad_dtype, n.state);
  ASSERT_EQ(graphed.trainer.options().state_dtype, n.state);
  for (int s = 0; s < kSteps + 1; ++s) {
    eager.step(s);
    graphed.step(s);
  }
  EXPECT_EQ(graphed.graphs->captures(), 1);
  EXPECT_EQ(graphed.graphs->replays(), kSteps);
  // cuDNN ran (eagerly, and while the graph was captured), not a silent fallback to flash.
  if (n.cudnn) {
    EXPECT_GT(eager.model.cudnn_attention_calls(), 0);
    EXPECT_GT(graphed.model.cudnn_attention_calls(), 0);
  }
  const State a = state_of(eager.trainer), b = state_of(graphed.trainer);
  EXPECT_EQ(a.metrics.step, kSteps + 1);
  EXPECT_GT(a.metrics.grad_norm, 0.0f);
  EXPECT_TRUE(a == b) << "a replayed step differs from the eager one";
  // A replay counts what its step did: the same collectives as the eager steps.
  EXPECT_EQ(eager.trainer.profile().all_gathers, graphed.trainer.profile().all_gathers);
  EXPECT_EQ(eager.trainer.profile().reduce_scatter_bytes, graphed.trainer.profile().reduce_scatter_bytes);
  EXPECT_EQ(eager.model.wgrad_counters().fused, graphed.model.wgrad_counters().fused);
}

TEST_P(StepGraphs, KeepingUnitsGatheredReplaysToo) {
  const Numerics n = GetParam();
  if (n.flash && !kernels::flash_attention_available())
    GTEST_SKIP() << "the tensor-core attention exists only in GPU builds (SHARDRL_ENABLE_CUDA)";
  if (n.cudnn && !kernels::cudnn_attention_available())
    GTEST_SKIP() << "cuDNN's attention exists only in GPU builds configured with cuDNN (CUDNN_ROOT)";
  Job eager(n.precision, false, false, n.state, n.flash, n.lora, n.cudnn),
      graphed(n.precision, true, false, n.state, n.flash, n.lora, n.cudnn);
  for (int s = 0; s < 4; ++s) {
    eager.step(s);
    graphed.step(s);
  }
  EXPECT_TRUE(state_of(eager.trainer) == state_of(graphed.trainer));
}

INSTANTIATE_TEST_SUITE_P(Precisions, StepGraphs,
                         ::testing::Values(Numerics{Precision::fp32, GradDtype::fp32},
                                           Numerics{Precision::bf16, GradDtype::fp32},
                                           Numerics{Precision::bf16, GradDtype::bf16},
                                           Numerics{Precision::bf16, GradDtype::fp32, true},
                                           Numerics{Precision::bf16, GradDtype::fp32, false, true},
                                           Numerics{Precision::bf16, GradDtype::fp32, false, false, true}),
                         [](const ::testing::TestParamInfo<Numerics>& p) {
                           if (p.param.precision == Precision::fp32) return "fp32";
                           if (p.param.flash) return "bf16_flash_attention";
                           if (p.param.cudnn) return "bf16_cudnn_attention";
                           if (p.param.lora) return "bf16_lora";
                           return p.param.state == GradDtype::bf16 ? "bf16_with_bf16_grads_and_moments" : "bf16";
                         });

TEST(StepGraphBuckets, AddressesStayAndABucketIsCapturedOnce) {
  Job job(Precision::bf16, true);
  const std::vector<const void*> before = job.trainer.buffer_addresses();
  for (int s = 0; s < 4; ++s) job.step(s);
  EXPECT_EQ(job.trainer.buffer_addresses(), before);
  EXPECT_EQ(job.graphs->captures(), 1);
  job.step(4, 1);   // one micro-batch: a new bucket, run eagerly
  EXPECT_EQ(job.graphs->captures(), 1);
  job.step(5, 1);   // and captured
  job.step(6);
  EXPECT_EQ(job.graphs->captures(), 2);
  EXPECT_EQ(job.graphs->replays(), 3 + 1 + 1);
  EXPECT_EQ(job.trainer.buffer_addresses(), before);
}

// A checkpoint's state written back into the same buffers, and loaded by a fresh job: both go
// on exactly as the uninterrupted job, the first without capturing again.
TEST(StepGraphBuckets, ResumedFromACheckpointEqualsUninterrupted) {
  Job whole(Precision::bf16, true);
  for (int s = 0; s < kSteps; ++s) whole.step(s);

  Job first(Precision::bf16, true);
  for (int s = 0; s < kSteps / 2; ++s) first.step(s);
  const State saved = state_of(first.trainer);
  for (int s = 100; s < 102; ++s) first.step(s);   // the state moves on, then the checkpoint returns
  restore(first.trainer, saved);
  for (int s = kSteps / 2; s < kSteps; ++s) first.step(s);
  EXPECT_EQ(first.graphs->captures(), 1);
  EXPECT_TRUE(state_of(first.trainer) == state_of(whole.trainer));

  Job fresh(Precision::bf16, true);
  restore(fresh.trainer, saved);
  for (int s = kSteps / 2; s < kSteps; ++s) fresh.step(s);
  EXPECT_TRUE(state_of(fresh.trainer) == state_of(whole.trainer));
}

// The peak learning rate changes between the warm-up and RL: a step captured before the change
// follows it (the rate is read on the device).
TEST(StepGraphBuckets, PeakLearningRateChangeReachesACapturedStep) {
  Job eager(Precision::fp32, false), graphed(Precision::fp32, true);
  for (int s = 0; s < 6; ++s) {
    if (s == 3) {
      eager.trainer.set_peak_lr(4e-4f);
      graphed.trainer.set_peak_lr(4e-4f);
    }
    eager.step(s);
    graphed.step(s);
  }
  EXPECT_EQ(graphed.graphs->captures(), 1);
  const State a = state_of(eager.trainer), b = state_of(graphed.trainer);
  EXPECT_FLOAT_EQ(a.metrics.lr, scheduled_lr([] {
                    OptimizerOptions o = optimizer_options(config(Precision::fp32, true));
                    o.lr = 4e-4f;
                    return o;
                  }(), 6));
  EXPECT_TRUE(a == b);
}

}  // namespace
}  // namespace shardrl
