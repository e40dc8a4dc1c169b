// The RL loop end to end on the tiny model (np 1, 2 and 4):
// - the same configuration gives the same trajectory at any world size (fp32): the job on all
//   ranks against the same job on one rank (every rank runs that reference on MPI_COMM_SELF),
//   and with the paged rollout engine; captured steps follow the eager ones exactly;
// - the sampler's log-probabilities give the trajectory of recomputed ones;
// - rollout and train re-entered 200 times, in varying order, hold the same memory and open
//   handles from the second iteration on (the fourth upstream failure);
// - the KL to a frozen reference is exactly 0 before the first update and grows after it;
// - a rollout given up for a stop changes nothing: the iteration run again is the uninterrupted one.
// Parallel rollout, mixture-of-experts policies and pre-tokenized datasets: test_grpo_loop_*.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/live_handles.hpp"
#include "core/memory_ledger.hpp"
#include "device_allocation_counter.hpp"
#include "flash_attention_shape.hpp"
#include "grpo_loop_test_support.hpp"
#include "io/hdf5_handle.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl {
namespace {

using namespace grpo_loop_test;

TEST(GrpoLoop, SameTrajectoryAsOneRank) {
  const Config c = small_config();
  constexpr int kIterations = 4;
  std::vector<double> warm_world, warm_one;
  std::vector<Record> world, one;
  {
    Job job(c, MPI_COMM_WORLD);
    warm_world = job.warm_up();
    world = trajectory(job, kIterations);
  }
  {
    Job job(c, MPI_COMM_SELF);
    warm_one = job.warm_up();
    one = trajectory(job, kIterations);
  }
  // rollout.engine = "paged" on every rank, with a pool small enough that rows wait and are
  // preempted: the same draws, so the same trajectory.
  std::vector<Record> paged;
  {
    Config p = c;
    p.rollout.engine = RolloutEngine::paged;
    p.rollout.kv_cache_tokens = 1;
    Job job(p, MPI_COMM_WORLD);
    job.warm_up();
    paged = trajectory(job, kIterations);
  }
  for (std::size_t s = 0; s < warm_one.size(); ++s) expect_close(warm_world[s], warm_one[s], "warm-up loss", int(s));
  bool learned_something = false;
  for (int it = 0; it < kIterations; ++it) {
    expect_close(paged[it].reward, one[it].reward, "reward (paged engine)", it);
    expect_close(paged[it].loss, one[it].loss, "loss (paged engine)", it);
    expect_close(paged[it].entropy, one[it].entropy, "entropy (paged engine)", it);
    expect_close(world[it].reward, one[it].reward, "reward", it);
    expect_close(world[it].loss, one[it].loss, "loss", it);
    expect_close(world[it].kl, one[it].kl, "kl", it);
    expect_close(world[it].grad_norm, one[it].grad_norm, "grad_norm", it);
    expect_close(world[it].clip_frac, one[it].clip_frac, "clip_frac", it);
    expect_close(world[it].entropy, one[it].entropy, "entropy", it);
    learned_something |= one[it].reward_std > 0;
  }
  EXPECT_TRUE(learned_something) << "every advantage was zero: the comparison proves little";
  EXPECT_LT(warm_one.back(), warm_one.front());
}

// A stop that leaves no time for the rollout (the job's abandon check: SIGTERM) gives it up on
// every rank, cut short inside the decode steps of the rank that asked, and changes nothing: the
// iteration run again afterwards draws, scores and trains what an uninterrupted job does, bit for
// bit. The check holds on rank 0 only (its signal came first): the other ranks give up too, at
// the agreement after the generate call. Both engines.
TEST(GrpoLoop, AnAbandonedRolloutLeavesTheStateAsItWas) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Config c = small_config();
  c.rl.sft_steps = 5;
  constexpr int kIterations = 3;
  for (const RolloutEngine engine : {RolloutEngine::static_batch, RolloutEngine::paged}) {
    c.rollout.engine = engine;
    const char* what = engine == RolloutEngine::paged ? "paged engine" : "static engine";
    std::vector<Record> want, got;
    {
      Job job(c, MPI_COMM_WORLD);
      job.warm_up();
      want = trajectory(job, kIterations);
    }
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    for (int it = 0; it < kIterations; ++it) {
      if (it == 1) {
        int asked = 0;
        job.loop.abandon_rollouts_when([&] { return rank == 0 && ++asked > 1; });
        EXPECT_THROW(job.loop.rollout(it), RolloutAbandoned) << what;
        // Asked before decode steps 1 and 2, which it cut (the agreement then votes the cut).
        if (rank == 0) {
          EXPECT_EQ(asked, 2) << what;
        }
        job.loop.abandon_rollouts_when({});
      }
      RolloutBatch b = job.loop.rollout(it);
      TrainStats t = job.loop.train(b);
      got.push_back({b.reward_mean, b.reward_std, t.loss, t.kl, t.grad_norm, t.clip_frac, b.entropy, t.aux_loss});
    }
    for (int it = 0; it < kIterations; ++it) {
      EXPECT_EQ(got[it].reward, want[it].reward) << what << ", iteration " << it;
      EXPECT_EQ(got[it].loss, want[it].loss) << what << ", iteration " << it;
      EXPECT_EQ(got[it].grad_norm, want[it].grad_norm) << what << ", iteration " << it;
      EXPECT_EQ(got[it].kl, want[it].kl) << what << ", iteration " << it;
      EXPECT_EQ(got[it].entropy, want[it].entropy) << what << ", iteration " << it;
    }
  }
}

// train.cuda_graph = "full" in the RL job: the warm-up and the GRPO steps, each captured once and
// replayed across rollouts (the arena's rollout phase overwrites the train phase's buffers in
// between), follow the eager job exactly; bf16 with two minibatches per rollout.
TEST(GrpoLoop, CapturedStepsFollowTheEagerTrajectory) {
  if (!CapturedGraph::native()) GTEST_SKIP() << "CUDA graphs need a GPU build (test_step_graphs covers the schedule)";
  // Unpacked, every GRPO step has the same shape (one bucket); packed, the micro-batch count and
  // row length follow the data, so buckets (each first run eagerly) depend on the rollouts.
  // Flash: a head dim the tensor-core attention takes, so prefill, the old/reference forwards and
  // the captured steps run it (packed rows included).
  for (const bool flash : {false, true}) {
    for (const bool packing : {false, true}) {
      if (flash && !kernels::flash_attention_available()) continue;
      SCOPED_TRACE(std::string(packing ? "packed" : "one sequence per row") + (flash ? ", flash attention" : ""));
      Config c = small_config();
      c.model.precision = Precision::bf16;
      if (flash) {
        use_flash_attention_shape(c);
        c.model.attention = AttentionChoice::flash;
      }
      c.rl.sft_steps = 6;
      c.train.packing = packing;
      constexpr int kIterations = 5;
      std::vector<double> warm_eager, warm_graph;
      std::vector<Record> eager, graph;
      {
        Job job(c, MPI_COMM_WORLD);
        // A captured step runs the head on every token (its shapes cannot follow the count of
        // scored ones); the eager job does the same here so that both run the same GEMMs.
        job.model.score_every_token(true);
        warm_eager = job.warm_up();
        eager = trajectory(job, kIterations);
      }
      c.train.cuda_graph = TrainGraph::full;
      {
        Job job(c, MPI_COMM_WORLD);
        warm_graph = job.warm_up();
        // This rank's ids per iteration: the ranks' rows must differ for the agreement below to
        // be tested (they do: the completions end at different lengths).
        long my_ids = 0;
        for (int it = 0; it < kIterations; ++it) {
          RolloutBatch b = job.loop.rollout(it);
          for (const Sequence& q : b.sequences) my_ids += static_cast<long>(q.ids.size()) * (it + 1);
          TrainStats t = job.loop.train(b);
          graph.push_back({b.reward_mean, b.reward_std, t.loss, t.kl, t.grad_norm, t.clip_frac, b.entropy, t.aux_loss});
        }
        long ids_low = 0, ids_high = 0;
        MPI_Allreduce(&my_ids, &ids_low, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&my_ids, &ids_high, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
        int ranks = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &ranks);
        if (ranks > 1) {
          EXPECT_NE(ids_low, ids_high) << "every rank's rows had the same ids: the ranks' agreement is not tested";
        }
        ASSERT_NE(job.loop.step_graphs(), nullptr);
        if (!packing) {
          EXPECT_EQ(job.loop.step_graphs()->captures(), 2) << "one warm-up graph and one GRPO graph";
          // Each bucket's first step runs eagerly.
          EXPECT_EQ(job.loop.step_graphs()->replays(), (c.rl.sft_steps - 1) + (kIterations * c.rl.minibatches - 1));
        } else {
          EXPECT_GE(job.loop.step_graphs()->captures(), 2);
          EXPECT_GT(job.loop.step_graphs()->replays(), c.rl.sft_steps - 1) << "no GRPO step was replayed";
        }
        // The ranks' rows differ in length, but every rank steps in the same buckets: they
        // capture and replay together.
        int counts[2] = {job.loop.step_graphs()->captures(), job.loop.step_graphs()->replays()}, low[2], high[2];
        MPI_Allreduce(counts, low, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(counts, high, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        EXPECT_EQ(low[0], high[0]) << "captures differ between ranks";
        EXPECT_EQ(low[1], high[1]) << "replays differ between ranks";
      }
      EXPECT_EQ(warm_graph, warm_eager);
      for (int it = 0; it < kIterations; ++it) {
        EXPECT_EQ(graph[it].reward, eager[it].reward) << "iteration " << it;
        EXPECT_EQ(graph[it].loss, eager[it].loss) << "iteration " << it;
        EXPECT_EQ(graph[it].grad_norm, eager[it].grad_norm) << "iteration " << it;
        EXPECT_EQ(graph[it].kl, eager[it].kl) << "iteration " << it;
      }
    }
  }
}

// rl.old_logp = "rollout" takes the sampler's log-probabilities: in fp32 they are the training
// forward's to rounding (same positions, same tokens), so the trajectory equals recomputing them.
void sampler_logp_equals_recomputed_logp(int lora_rank) {
  Config c = small_config();
  c.rl.kl_coef = 0;      // the gradient comes from the surrogate alone
  if (lora_rank > 0) {
    c.lora.rank = lora_rank;
    c.lora.alpha = 2.0 * lora_rank;
    c.rl.kl_coef = 1e-9;   // records the KL to the base (the adapters' effect), too small to steer
    // As the LoRA quickstart: a random base drawn wider, so that adapters over its frozen head
    // and norms can reach answers in a short warm-up (and the groups have advantages).
    c.model.init_std = 0.5;
    c.rl.sft_lr = 1e-2;
    c.optim.lr = 2e-3;
  }
  std::vector<Record> recomputed, sampled;
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    recomputed = trajectory(job, 3);
  }
  c.rl.old_logp = OldLogp::rollout;
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    sampled = trajectory(job, 3);
  }
  for (int it = 0; it < 3; ++it) {
    expect_close(sampled[it].loss, recomputed[it].loss, "loss", it);
    expect_close(sampled[it].grad_norm, recomputed[it].grad_norm, "grad_norm", it);
    expect_close(sampled[it].reward, recomputed[it].reward, "reward", it);
    EXPECT_GT(recomputed[it].reward_std, 0.0) << "no advantages at iteration " << it << ": the comparison proves little";
  }
  // LoRA: the rollout sampled the adapted policy (its folded weights), not the base, which the
  // warm-up's adapters moved far from (the failure verl fixed: rollout sampling the base).
  if (lora_rank > 0) {
    EXPECT_GT(recomputed[0].kl, 1e-3) << "the adapters barely change the policy: a blind comparison";
  }
}

TEST(GrpoLoop, SamplerLogpEqualsRecomputedLogp) { sampler_logp_equals_recomputed_logp(0); }
TEST(GrpoLoop, SamplerLogpEqualsRecomputedLogpLora) { sampler_logp_equals_recomputed_logp(4); }

TEST(GrpoLoop, KlToTheFrozenReferenceStartsAtZero) {
  Config c = small_config();
  c.rl.minibatches = 1;   // the first step sees exactly the weights the reference froze
  c.rl.kl_coef = 0.5;
  Job job(c, MPI_COMM_WORLD);
  job.warm_up();
  std::vector<Record> t = trajectory(job, 3);
  EXPECT_EQ(t[0].kl, 0.0);
  EXPECT_GT(t[2].kl, 0.0);
  EXPECT_EQ(t[0].clip_frac, 0.0) << "old log-probabilities recomputed by the same weights: ratio 1";
}

// Rollout and train re-entered 200 times, with extra warm-up steps and back-to-back rollouts
// in between, in a NaN-poisoned arena: from the second iteration on the ledger (current and
// peak), the open communicators, streams and events and the HDF5 identifiers never change, and
// nothing at all is allocated in device memory (Kokkos' own count, beyond the ledger's).
// Rollout and train re-entered 200 times hold the same memory and handles from the second
// iteration on, with either rollout engine (the paged one's block table and pool are allocated
// once; its bookkeeping is host memory).
void two_hundred_alternations(RolloutEngine engine) {
  Config c = small_config();
  c.model.precision = Precision::bf16;
  c.rl.prompts_per_iteration = 4;
  c.rl.samples_per_prompt = 2;
  c.rl.sft_steps = 1;
  c.debug.check_released = true;
  c.rollout.engine = engine;
  Job job(c, MPI_COMM_WORLD);
  job.warm_up();
  struct Snapshot {
    std::int64_t total, peak, communicators, streams, events;
    long hdf5;
    bool operator==(const Snapshot& o) const {
      return total == o.total && peak == o.peak && communicators == o.communicators && streams == o.streams &&
             events == o.events && hdf5 == o.hdf5;
    }
  };
  auto snapshot = [] {
    const MemoryLedger& l = MemoryLedger::instance();
    return Snapshot{l.total(), l.peak(), live_handles(HandleKind::communicator), live_handles(HandleKind::stream),
                    live_handles(HandleKind::event), open_hdf5_objects()};
  };
  Snapshot after_second{};
  test::DeviceAllocationCounter allocations;
  int changed = 0;
  double last_reward = -1;
  for (int it = 0; it < 200; ++it) {
    if (it % 50 == 25) job.loop.warmup_step(1000 + it);           // a warm-up step between iterations
    if (it % 40 == 30) (void)job.loop.rollout(it);                  // a rollout whose batch is dropped
    RolloutBatch b = job.loop.rollout(it);
    TrainStats t = job.loop.train(b);
    ASSERT_TRUE(std::isfinite(t.loss) && std::isfinite(t.grad_norm)) << "iteration " << it;
    last_reward = b.reward_mean;
    if (it == 1) {
      after_second = snapshot();
      allocations.reset();
    }
    if (it > 1 && !(snapshot() == after_second)) ++changed;
  }
  EXPECT_EQ(changed, 0);
  EXPECT_EQ(allocations.count(), 0u) << "device allocations after the second iteration: " << allocations.describe();
  const Snapshot end = snapshot();
  EXPECT_EQ(end.total, after_second.total);
  EXPECT_EQ(end.peak, after_second.peak);
  EXPECT_EQ(end.communicators, 1);
  EXPECT_GE(end.events, 1) << "the trainer's events are counted";
  EXPECT_GE(last_reward, 0.0);
}

TEST(GrpoLoop, TwoHundredAlternationsHoldNothingNew) { two_hundred_alternations(RolloutEngine::static_batch); }
TEST(GrpoLoop, TwoHundredAlternationsHoldNothingNewPagedEngine) { two_hundred_alternations(RolloutEngine::paged); }

}  // namespace
}  // namespace shardrl
