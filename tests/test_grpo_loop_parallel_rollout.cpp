// Parallel rollout in the RL job: tensor-parallel decoding (a model split over groups of ranks) and
// expert-parallel decoding (each rank its own experts) draw what the whole model draws.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/memory_ledger.hpp"
#include "core/phase_arena.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "rl/grpo_loop.hpp"
#include "rl_test_job.hpp"

namespace shardrl {
namespace {

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
      for (int it = 0; it < 2; ++it) {
        if (it == 1) {
          // A stop seen by the group's last rank only, before its second decode step: its
          // partners' generators are cut there too (the group agrees before each step), every
          // rank gives the rollout up, and the iteration run again draws what it would have.
          int rank = 0;
          MPI_Comm_rank(MPI_COMM_WORLD, &rank);
          int asked = 0;
          job.loop.abandon_rollouts_when([&] { return rank % T == T - 1 && ++asked > 1; });
          EXPECT_THROW(job.loop.rollout(it), RolloutAbandoned) << what;
          EXPECT_TRUE(job.loop.last_generation().abandoned) << what << ", rank " << rank;
          EXPECT_EQ(job.loop.last_generation().decode_steps, 1) << what << ", rank " << rank;
          job.loop.abandon_rollouts_when({});
        }
        EXPECT_GT(expect_same_draws(job.loop.rollout(it), whole[static_cast<std::size_t>(it)],
                                    what + fmt::format(", iteration {}", it)),
                  50)
            << what;
      }
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

}  // namespace
}  // namespace shardrl
