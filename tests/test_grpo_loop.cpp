// The RL loop end to end on the tiny model (np 1, 2 and 4):
// - the same configuration gives the same trajectory at any world size (fp32): the job on all
//   ranks against the same job on one rank (every rank runs that reference on MPI_COMM_SELF),
//   and with the paged rollout engine;
// - rollout and train re-entered 200 times, in varying order, hold the same memory and open
//   handles from the second iteration on (the fourth upstream failure);
// - the KL to a frozen reference is exactly 0 before the first update and grows after it;
// - a pre-tokenized dataset on a small custom vocabulary (its own EOS, rows padded with it) is
//   learnt, and an id beyond the vocabulary stops every rank with the dataset line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/live_handles.hpp"
#include "core/memory_ledger.hpp"
#include "core/phase_arena.hpp"
#include "device_allocation_counter.hpp"
#include "flash_attention_shape.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "io/hdf5_handle.hpp"
#include "kernels/flash_attention.hpp"
#include "mpi/host_exchange.hpp"
#include "rl/grpo_loop.hpp"
#include "rl/sequence.hpp"
#include "rl/task.hpp"
#include "rl_test_job.hpp"

namespace shardrl {
namespace {

struct Record {
  double reward, reward_std, loss, kl, grad_norm, clip_frac, entropy, aux_loss;
};

std::vector<Record> trajectory(Job& job, int iterations) {
  std::vector<Record> out;
  for (int it = 0; it < iterations; ++it) {
    RolloutBatch b = job.loop.rollout(it);
    TrainStats t = job.loop.train(b);
    out.push_back({b.reward_mean, b.reward_std, t.loss, t.kl, t.grad_norm, t.clip_frac, b.entropy, t.aux_loss});
  }
  return out;
}

// fp32 rounding: relative 1e-4, with an absolute floor for values that cancel to near zero
// (the GRPO loss of normalised advantages is a sum of terms of both signs).
void expect_close(double got, double want, const char* what, int it) {
  EXPECT_LE(std::abs(got - want), 1e-4 * std::abs(want) + 1e-7)
      << what << " at iteration " << it << ": " << got << " vs " << want;
}

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

// A parallel rollout against the plain one: the same rows and tokens, log-probabilities within
// 2e-5 (fp32: sums or GEMMs over other splits round differently), the same rewards and totals.
// Returns the tokens compared.
int expect_same_draws(const RolloutBatch& got, const RolloutBatch& want, const std::string& what) {
  EXPECT_EQ(got.sequences.size(), want.sequences.size()) << what;
  if (got.sequences.size() != want.sequences.size()) return 0;
  int compared = 0;
  for (std::size_t r = 0; r < want.sequences.size(); ++r) {
    EXPECT_EQ(got.sequences[r].ids, want.sequences[r].ids) << what << ", row " << r;
    EXPECT_EQ(got.logp[r].size(), want.logp[r].size()) << what << ", row " << r;
    if (got.sequences[r].ids != want.sequences[r].ids || got.logp[r].size() != want.logp[r].size()) continue;
    for (std::size_t i = 0; i < want.logp[r].size(); ++i, ++compared)
      EXPECT_NEAR(got.logp[r][i], want.logp[r][i], 2e-5) << what << ", row " << r << ", token " << i;
    EXPECT_EQ(got.reward[r], want.reward[r]) << what << ", row " << r;
  }
  EXPECT_DOUBLE_EQ(got.reward_mean, want.reward_mean) << what;
  EXPECT_DOUBLE_EQ(got.tokens, want.tokens) << what;
  return compared;
}

// rollout.tensor_parallel = T: each group of T ranks decodes one model together (1/T of every
// layer's heads and MLP columns per rank, the two output projections summed over the group). The
// completions are the whole model's: the same tokens, and log-probabilities within 2e-5 (fp32:
// the sums' rounding; bf16's rounding would flip near ties, so the test runs fp32), with the
// static and the paged engine and with LoRA, for every T that divides the ranks, on a shape
// whose 8 heads and 4 kv heads split 4 ways; iterations 0-1 after the warm-up's training.
TEST(GrpoLoop, TensorParallelRolloutDrawsWhatTheWholeModelDraws) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) GTEST_SKIP() << "tensor-parallel decoding needs 2 or more ranks";
  Config c = small_config();
  c.model.preset = "custom";
  c.model.n_heads = 8;
  c.model.n_kv_heads = 4;
  c.model.head_dim = 8;
  c.rl.sft_steps = 5;
  c.rl.task = "sort";
  // The static and the paged engine; and LoRA (rank 4, trained by the warm-up), whose adapters
  // are folded into each whole unit before it is split.
  for (const auto& [engine, lora] : {std::pair{RolloutEngine::static_batch, 0}, std::pair{RolloutEngine::paged, 0},
                                    std::pair{RolloutEngine::static_batch, 4}}) {
    c.rollout.engine = engine;
    c.lora.rank = lora;
    c.rollout.tensor_parallel = 1;
    std::vector<RolloutBatch> whole;
    {
      Job job(c, MPI_COMM_WORLD);
      job.warm_up();
      for (int it = 0; it < 2; ++it) whole.push_back(job.loop.rollout(it));
    }
    for (int T = 2; T <= size; T *= 2) {
      if (size % T != 0) continue;
      Config t = c;
      t.rollout.tensor_parallel = T;
      Job job(t, MPI_COMM_WORLD);
      job.warm_up();
      const std::string what = fmt::format("{} engine, LoRA rank {}, T = {}",
                                           engine == RolloutEngine::paged ? "paged" : "static", lora, T);
      for (int it = 0; it < 2; ++it)
        EXPECT_GT(expect_same_draws(job.loop.rollout(it), whole[static_cast<std::size_t>(it)],
                                    what + fmt::format(", iteration {}", it)),
                  50)
            << what;
    }
  }
}

// rollout.expert_parallel: each rank decodes its own rows with its own experts of the MoE layer
// (the dense part gathered, 1 / ranks of the experts), the routed rows travelling to their
// experts' ranks and back in lockstep. The completions are whole-expert decoding's: the same
// tokens, log-probabilities within 2e-5 (fp32: the experts' GEMMs run over other row batches),
// with the static and the paged engine (prefilling 2 rows per call) and with LoRA on the experts,
// on 3 prompts per minibatch,
// so ranks hold different row counts (at np 4 one rank none, running padding forwards); and the
// rollout's weights are the training gather's (dense part and own experts), not the whole model.
TEST(GrpoLoop, ExpertParallelRolloutDrawsWhatTheWholeExpertSetDraws) {
  Config c = small_moe_config();
  c.fsdp.expert_parallel = true;
  c.rl.sft_steps = 5;
  c.rl.prompts_per_iteration = 6;
  for (const auto& [engine, lora] : {std::pair{RolloutEngine::static_batch, 0}, std::pair{RolloutEngine::paged, 0},
                                    std::pair{RolloutEngine::static_batch, 4}}) {
    c.rollout.engine = engine;
    c.lora.rank = lora;
    if (lora > 0) c.lora.targets = {"q", "v", "experts"};
    // The paged engine prefills 2 rows (of seq_len + 1 positions) per call: more calls, in lockstep.
    c.rollout.prefill_tokens = engine == RolloutEngine::paged ? 2 * (c.train.seq_len + 1) : 0;
    const std::string what =
        fmt::format("{} engine, LoRA rank {}", engine == RolloutEngine::paged ? "paged" : "static", lora);
    std::vector<RolloutBatch> batches[2];
    std::int64_t weight_bytes[2] = {0, 0}, gathered = 0, padded = 0;
    for (const bool ep : {false, true}) {
      Config e = c;
      e.rollout.expert_parallel = ep;
      Job job(e, MPI_COMM_WORLD);
      job.warm_up();
      for (int it = 0; it < 2; ++it) batches[ep].push_back(job.loop.rollout(it));
      weight_bytes[ep] = job.arena.phase_bytes(Phase::rollout, MemoryCategory::gather);
      for (int u = 0; u < job.trainer.layout().unit_count(); ++u) {
        gathered += ep ? job.trainer.layout().unit(u).gathered : 0;
        padded += ep ? job.trainer.layout().unit(u).padded : 0;
      }
    }
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const std::int64_t es = sizeof(float);
    // The arena aligns each buffer: a few hundred bytes per unit at most.
    EXPECT_NEAR(double(weight_bytes[0]), double(padded * es), 4096.0) << what;
    EXPECT_NEAR(double(weight_bytes[1]), double(gathered * es), 4096.0) << what;
    if (size > 1) {
      EXPECT_LT(gathered, padded) << what;
    }
    for (std::size_t it = 0; it < 2; ++it) {
      const int compared = expect_same_draws(batches[1][it], batches[0][it], what + fmt::format(", iteration {}", it));
      EXPECT_GE(compared, static_cast<int>(batches[0][it].sequences.size())) << what << ": a token or more per row";
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
        warm_eager = job.warm_up();
        eager = trajectory(job, kIterations);
      }
      c.train.cuda_graph = TrainGraph::full;
      {
        Job job(c, MPI_COMM_WORLD);
        warm_graph = job.warm_up();
        graph = trajectory(job, kIterations);
        ASSERT_NE(job.loop.step_graphs(), nullptr);
        if (!packing) {
          EXPECT_EQ(job.loop.step_graphs()->captures(), 2) << "one warm-up graph and one GRPO graph";
          // Each bucket's first step runs eagerly.
          EXPECT_EQ(job.loop.step_graphs()->replays(), (c.rl.sft_steps - 1) + (kIterations * c.rl.minibatches - 1));
        } else {
          EXPECT_GE(job.loop.step_graphs()->captures(), 2);
          EXPECT_GT(job.loop.step_graphs()->replays(), c.rl.sft_steps - 1) << "no GRPO step was replayed";
        }
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

// A mixture-of-experts policy (every second layer: 4 experts, top 2, a shared expert, the
// load-balancing loss on) runs the whole job: the warm-up learns, rollout decodes through the
// experts, GRPO steps stay finite, and every rank ends with the same trajectory as one rank.
TEST(GrpoLoop, MixtureOfExpertsPolicyRuns) {
  Config c = small_moe_config();
  c.rl.sft_steps = 10;
  std::vector<double> warm_world, warm_one;
  std::vector<Record> world, one;
  {
    Job job(c, MPI_COMM_WORLD);
    ASSERT_TRUE(job.model.options().shape.moe_layer(1));
    warm_world = job.warm_up();
    world = trajectory(job, 3);
  }
  {
    Job job(c, MPI_COMM_SELF);
    warm_one = job.warm_up();
    one = trajectory(job, 3);
  }
  // And with expert parallelism (fsdp.expert_parallel, 4 experts over 1, 2 or 4 ranks): the
  // job's own build path makes the exchange, the rollout gathers every expert.
  std::vector<double> warm_ep;
  std::vector<Record> ep;
  {
    Config e = c;
    e.fsdp.expert_parallel = true;
    Job job(e, MPI_COMM_WORLD);
    ASSERT_NE(job.model.options().expert_exchange, nullptr);
    ASSERT_TRUE(job.trainer.layout().unit(2).expert_parallel()) << "layer 1's unit";
    warm_ep = job.warm_up();
    ep = trajectory(job, 3);
  }
  EXPECT_LT(warm_one.back(), warm_one.front());
  for (std::size_t s = 0; s < warm_one.size(); ++s) {
    expect_close(warm_world[s], warm_one[s], "warm-up loss", int(s));
    expect_close(warm_ep[s], warm_one[s], "warm-up loss, expert parallel", int(s));
  }
  for (int it = 0; it < 3; ++it) {
    expect_close(ep[it].aux_loss, one[it].aux_loss, "aux_loss, expert parallel", it);
    expect_close(ep[it].reward, one[it].reward, "reward, expert parallel", it);
    expect_close(ep[it].grad_norm, one[it].grad_norm, "grad_norm, expert parallel", it);
  }
  for (int it = 0; it < 3; ++it) {
    ASSERT_TRUE(std::isfinite(world[it].loss) && std::isfinite(world[it].grad_norm)) << "iteration " << it;
    // One MoE layer: E * sum_e f_e P_e, with f_e the share of tokens that picked e (summing to
    // top_k): top_k = 2 when balanced, at most E * top_k.
    EXPECT_GT(world[it].aux_loss, 1.0) << "iteration " << it;
    EXPECT_LE(world[it].aux_loss, 8.0) << "iteration " << it;
    expect_close(world[it].aux_loss, one[it].aux_loss, "aux_loss", it);
    expect_close(world[it].reward, one[it].reward, "reward", it);
    expect_close(world[it].grad_norm, one[it].grad_norm, "grad_norm", it);
  }
}

// LoRA on the same MoE policy (adapters on the attention, the dense layer's MLP and every
// expert; the base frozen), sharded with the experts and by expert parallelism: the whole job
// (warm-up, rollout over the folded weights, GRPO steps) follows one rank's trajectory.
TEST(GrpoLoop, LoraOnAnExpertParallelMixtureOfExpertsPolicy) {
  Config c = small_moe_config();
  c.rl.sft_steps = 10;
  c.lora.rank = 4;
  c.lora.alpha = 8.0;
  c.lora.targets = {"q", "k", "v", "o", "gate", "up", "down", "experts"};
  auto run = [](const Config& config, MPI_Comm comm, std::vector<double>& warm, std::vector<Record>& steps) {
    Job job(config, comm);
    ASSERT_TRUE(job.trainer.lora());
    warm = job.warm_up();
    steps = trajectory(job, 3);
  };
  std::vector<double> warm_one, warm_world, warm_ep;
  std::vector<Record> one, world, ep;
  run(c, MPI_COMM_SELF, warm_one, one);
  run(c, MPI_COMM_WORLD, warm_world, world);
  Config e = c;
  e.fsdp.expert_parallel = true;
  run(e, MPI_COMM_WORLD, warm_ep, ep);
  EXPECT_LT(warm_one.back(), warm_one.front()) << "the adapters learn in the warm-up";
  for (std::size_t s = 0; s < warm_one.size(); ++s) {
    expect_close(warm_world[s], warm_one[s], "LoRA warm-up loss", int(s));
    expect_close(warm_ep[s], warm_one[s], "LoRA warm-up loss, expert parallel", int(s));
  }
  for (int it = 0; it < 3; ++it) {
    ASSERT_TRUE(std::isfinite(ep[it].loss) && std::isfinite(ep[it].grad_norm)) << "iteration " << it;
    expect_close(world[it].reward, one[it].reward, "LoRA reward", it);
    expect_close(world[it].grad_norm, one[it].grad_norm, "LoRA grad_norm", it);
    expect_close(ep[it].reward, one[it].reward, "LoRA reward, expert parallel", it);
    expect_close(ep[it].grad_norm, one[it].grad_norm, "LoRA grad_norm, expert parallel", it);
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

// ------------------------------------------------------------------------ pre-tokenized datasets

namespace fs = std::filesystem;

// Dataset files of a test, written by rank 0 and read by every rank; removed at the end of the
// test (every rank past its reads first).
class SharedDatasets {
 public:
  SharedDatasets() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    if (rank_ == 0) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      dir_ = (fs::temp_directory_path() / ("shardrl_grpo_loop_" + std::to_string(getpid()) + "_" + info->name()))
                 .string();
      fs::remove_all(dir_);
      fs::create_directories(dir_);
    }
    broadcast_string(MPI_COMM_WORLD, dir_, 0);
  }
  ~SharedDatasets() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (rank_ == 0) fs::remove_all(dir_, ec);
  }
  SharedDatasets(const SharedDatasets&) = delete;
  SharedDatasets& operator=(const SharedDatasets&) = delete;

  // Writes `text` to <dir>/<name> and returns its path, once every rank can read it.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (fs::path(dir_) / name).string();
    if (rank_ == 0) std::ofstream(path, std::ios::binary) << text;
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
  }

 private:
  int rank_ = 0;
  std::string dir_;
};

// A model with its own 32-token vocabulary (the byte tokenizer's BOS 256, EOS 257 and PAD 258 are
// all beyond it) on a pre-tokenized dataset that ends completions with id 2.
constexpr int kVocab = 32;
constexpr int kEos = 2;

Config pre_tokenized_config(const std::string& dataset) {
  Config c = small_config();
  c.model.preset = "custom";
  c.model.vocab_size = kVocab;
  c.rl.task = "jsonl";
  c.rl.dataset = dataset;
  c.rl.eos_id = kEos;
  c.rl.partial_credit = false;   // jsonl: exact match only
  return c;
}

// Four prompts [1, 10 + a] with two-token answers [20 + a, 26 - a]: learnable by a warm-up.
std::string learnable_lines() {
  std::string text;
  for (int a = 0; a < 4; ++a)
    text += "{\"prompt_ids\": [1, " + std::to_string(10 + a) + "], \"answer_ids\": [" + std::to_string(20 + a) + ", " +
            std::to_string(26 - a) + "]}\n";
  return text;
}

// Whether `ok` holds on every rank.
bool on_every_rank(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

TEST(FillRows, PadsWithTheGivenId) {
  Sequence s;
  s.ids = {1, 10, 20, 26, kEos};   // the last id is only a target
  s.prompt_len = 2;
  std::vector<std::int32_t> tokens, targets;
  fill_rows({s}, 0, 1, 2, 6, 31, tokens, targets);   // the second row is all padding
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{1, 10, 20, 26, 31, 31, 31, 31, 31, 31, 31, 31}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{10, 20, 26, kEos, 31, 31, 31, 31, 31, 31, 31, 31}));
  fill_rows({s}, 0, 1, 1, 6, 258, tokens, targets);
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{1, 10, 20, 26, 258, 258}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{10, 20, 26, kEos, 258, 258}));
}

Sequence sequence_of(int positions, std::int32_t first_id) {
  Sequence s;
  for (int t = 0; t <= positions; ++t) s.ids.push_back(first_id + t);
  s.prompt_len = 1;
  return s;
}

// First fit in order: each sequence goes into the first row with room; without packing one per
// row. Slots, tokens, targets and positions of the packed rows by hand.
TEST(PackRows, FirstFitInOrderWithPositionsRestarting) {
  const std::vector<Sequence> seqs = {sequence_of(5, 10), sequence_of(4, 20), sequence_of(2, 30),
                                      sequence_of(3, 40), sequence_of(1, 50)};
  const PackedRows p = pack_rows(seqs, 0, 5, 8, true);
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0], (std::vector<int>{0, 2, 4}));   // 5 + 2 + 1 = 8
  EXPECT_EQ(p.rows[1], (std::vector<int>{1, 3}));      // 4 + 3 = 7
  EXPECT_EQ(p.offset_of, (std::vector<int>{0, 0, 5, 4, 7}));
  EXPECT_EQ(p.slot(seqs, 0, 3, 0, 0), std::size_t(8 + 4));   // row 1, offset 4, trained token 0 at position 0
  EXPECT_EQ(p.slot(seqs, 0, 3, 2, 1), std::size_t(4 + 2));   // with row 1 the micro-batch's first
  std::vector<std::int32_t> tokens, targets, positions;
  fill_packed_rows(seqs, p, 1, 2, 99, tokens, targets, positions);   // row 1, then a row of padding
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{20, 21, 22, 23, 40, 41, 42, 99, 99, 99, 99, 99, 99, 99, 99, 99}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{21, 22, 23, 24, 41, 42, 43, 99, 99, 99, 99, 99, 99, 99, 99, 99}));
  EXPECT_EQ(positions, (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5, 6, 7}));
  const PackedRows one = pack_rows(seqs, 1, 4, 8, false);
  ASSERT_EQ(one.rows.size(), 3u);
  EXPECT_EQ(one.row_of, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(one.offset_of, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(row_length(seqs, 0, 5, 4, 64), 8);    // longest 5 positions, rounded up to 4s
  EXPECT_EQ(row_length(seqs, 0, 5, 32, 6), 6);    // at most max_len
}

// The warm-up trains on prompt_ids + answer_ids + rl.eos_id, rollout stops at rl.eos_id and the
// reward compares ids: an untrained policy never answers, a warmed-up one nearly always does, and
// RL keeps it there; every rank follows one rank's trajectory.
TEST(GrpoLoop, PreTokenizedDatasetWithItsOwnEosIsLearnt) {
  SharedDatasets files;
  Config c = pre_tokenized_config(files.write("learnable.jsonl", learnable_lines()));
  c.rl.sft_steps = 80;   // warm-up loss ~0.002 per token: nearly every sample is exact
  std::vector<double> world, one;
  double untrained = -1;
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
    Job job(c, comm);
    if (comm == MPI_COMM_WORLD) untrained = job.loop.rollout(0).reward_mean;
    const std::vector<double> losses = job.warm_up();
    // A fresh model starts near ln(32): the head has the dataset's vocabulary.
    EXPECT_NEAR(losses.front(), std::log(double(kVocab)), 0.3);
    EXPECT_LT(losses.back(), 0.02);
    std::vector<double>& rewards = comm == MPI_COMM_WORLD ? world : one;
    for (int it = 0; it < 3; ++it) {
      RolloutBatch b = job.loop.rollout(it);
      // Completions stop at id 2 (two answer ids and EOS), not at max_new_tokens = 8.
      EXPECT_LE(b.response_len_mean, 3.5) << "iteration " << it;
      TrainStats t = job.loop.train(b);
      ASSERT_TRUE(std::isfinite(t.loss) && std::isfinite(t.grad_norm)) << "iteration " << it;
      rewards.push_back(b.reward_mean);
    }
  }
  EXPECT_LT(untrained, 0.05);
  double mean = 0;
  for (int it = 0; it < 3; ++it) {
    expect_close(world[it], one[it], "reward", it);
    EXPECT_GE(world[it], 0.8) << "iteration " << it;
    mean += world[it] / 3;
  }
  EXPECT_GE(mean, 0.9);
}

// An id beyond model.vocab_size would index past the embedding: the loop checks every example of
// the batch on every rank as it takes it, so every rank stops with the same InputError naming the
// dataset line, before any collective of the phase (no rank hangs).
TEST(GrpoLoop, IdBeyondTheVocabularyStopsEveryRank) {
  const std::string good = "{\"prompt_ids\": [1, 10], \"answer_ids\": [20, 26]}\n";
  struct Case {
    const char* name;
    std::string bad_line;
    bool warm_up;
    const char* field_and_id;
  };
  const Case cases[] = {
      {"prompt.jsonl", "{\"prompt_ids\": [1, 40], \"answer_ids\": [21, 25]}\n", false,
       "field \"prompt_ids\" element 1 is id 40"},
      {"answer.jsonl", "{\"prompt_ids\": [1, 11], \"answer_ids\": [21, 32]}\n", true,
       "field \"answer_ids\" element 1 is id 32"},
  };
  SharedDatasets files;
  for (const Case& k : cases) {
    const Config c = pre_tokenized_config(files.write(k.name, good + k.bad_line));
    // The first example of the batch drawn from line 2, found as the loop finds it.
    TaskOptions o;
    o.name = "jsonl";
    o.dataset_path = c.rl.dataset;
    o.eos_id = c.rl.eos_id;
    const auto task = make_task(o);
    const auto seed = static_cast<std::uint64_t>(c.run.seed) + (k.warm_up ? 1 : 0);
    const std::int64_t count = k.warm_up ? c.rl.sft_batch_size : c.rl.prompts_per_iteration;
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < count && first_bad < 0; ++i)
      if (task->example(seed, 0, i).source == c.rl.dataset + ":2") first_bad = i;
    ASSERT_GE(first_bad, 0) << "the batch never draws line 2: the test proves nothing";
    const std::string expected = fmt::format(
        "{}:2: {}, outside the model's vocabulary (model.vocab_size = 32; {} {} of {} 0)", c.rl.dataset,
        k.field_and_id, k.warm_up ? "warm-up example" : "prompt", first_bad, k.warm_up ? "step" : "iteration");

    Job job(c, MPI_COMM_WORLD);
    std::string message = "(no InputError)";
    try {
      if (k.warm_up) job.loop.warmup_step(0);
      else job.loop.rollout(0);
    } catch (const InputError& e) {
      message = e.what();
    }
    EXPECT_EQ(message, expected) << k.name;
    EXPECT_TRUE(on_every_rank(message == expected)) << k.name << ": some rank did not stop with the message";
  }
}

}  // namespace
}  // namespace shardrl
