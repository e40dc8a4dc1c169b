// The RL objective's options in the whole loop (np 1, 2 and 4), on the tiny model:
// - at rollout.temperature = 0.7 the sampler's log-probabilities are the training forward's at the
//   same temperature (fp32: to rounding; bf16: to bf16 rounding), so the first minibatch's ratio
//   is 1;
// - every advantage estimator, KL estimator, KL in the reward, overlong mode, truncated importance
//   sampling and the entropy bonus give the same trajectory at any world size as on one rank;
// - dynamic sampling fills the batch with informative groups only, deterministically at any
//   world size, and reports its rounds and dropped groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "rl/grpo_loop.hpp"
#include "rl_test_job.hpp"

namespace shardrl {
namespace {

struct Step {
  RolloutBatch batch;
  TrainStats train;
};

// The job's first iterations; with `row_len`, checking that the train phase's rows were that long.
std::vector<Step> run(const Config& c, MPI_Comm comm, int iterations, int row_len = 0) {
  Job job(c, comm);
  job.warm_up();
  std::vector<Step> out;
  for (int it = 0; it < iterations; ++it) {
    RolloutBatch b = job.loop.rollout(it);
    TrainStats t = job.loop.train(b);
    if (row_len > 0) {
      EXPECT_EQ(job.model.batch_seq_len(), row_len) << "iteration " << it;
    }
    out.push_back({std::move(b), t});
  }
  return out;
}

// fp32 rounding: relative 1e-4, with an absolute floor for values that cancel to near zero.
void expect_close(double got, double want, const std::string& what, int it) {
  EXPECT_LE(std::abs(got - want), 1e-4 * std::abs(want) + 1e-7)
      << what << " at iteration " << it << ": " << got << " vs " << want;
}

void expect_same_trajectory(const std::vector<Step>& world, const std::vector<Step>& one) {
  ASSERT_EQ(world.size(), one.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    const int it = static_cast<int>(i);
    expect_close(world[i].batch.reward_mean, one[i].batch.reward_mean, "reward", it);
    expect_close(world[i].batch.entropy, one[i].batch.entropy, "entropy", it);
    expect_close(world[i].train.loss, one[i].train.loss, "loss", it);
    expect_close(world[i].train.kl, one[i].train.kl, "kl", it);
    expect_close(world[i].train.grad_norm, one[i].train.grad_norm, "grad_norm", it);
    expect_close(world[i].train.clip_frac, one[i].train.clip_frac, "clip_frac", it);
    EXPECT_EQ(world[i].batch.sampling_rounds, one[i].batch.sampling_rounds) << "iteration " << it;
    EXPECT_EQ(world[i].batch.groups_dropped, one[i].batch.groups_dropped) << "iteration " << it;
  }
}

// T = 0.7: the sampler records log softmax(logits / 0.7) of each drawn token, and the recomputed
// old log-probabilities are the training forward's at 0.7 too. In fp32 the two paths (decode
// with a KV cache, a full-sequence forward) agree to rounding: the rollout/train ratio is 1 to
// 1e-5, and with old_logp = "rollout" the first minibatch's ratio (the loss kernel's) likewise.
// In bf16 they differ by the rounding of bf16 logits, a few parts in a thousand of the ratio.
TEST(RlObjective, LogprobsAtTheSamplingTemperatureMatchTheTrainingForward) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (OldLogp old_logp : {OldLogp::recompute, OldLogp::rollout}) {
      SCOPED_TRACE(std::string(precision == Precision::fp32 ? "fp32" : "bf16") +
                   (old_logp == OldLogp::recompute ? " recompute" : " rollout"));
      Config c = small_config();
      c.model.precision = precision;
      c.rollout.temperature = 0.7;
      c.rl.old_logp = old_logp;
      c.rl.sft_steps = 5;   // a policy far from one-hot: temperature changes every log-probability
      const std::vector<Step> steps = run(c, MPI_COMM_WORLD, 2);
      const double tol = precision == Precision::fp32 ? 1e-5 : 2e-2;
      for (int it = 0; it < 2; ++it) {
        const TrainStats& t = steps[it].train;
        EXPECT_NEAR(t.rollout_train_ratio_mean, 1.0, tol) << "iteration " << it;
        EXPECT_NEAR(t.rollout_train_ratio_max, 1.0, precision == Precision::fp32 ? 1e-4 : 0.1) << "iteration " << it;
        // The sampled tokens' distributions are far from one-hot (the check above is not vacuous).
        EXPECT_GT(steps[it].batch.entropy, 0.5) << "iteration " << it;
      }
    }
}

struct OptionCase {
  const char* name;
  std::function<void(Config&)> set;
  bool changes_trajectory = true;   // low_var_kl is k3 until a clamp acts, which these runs never reach
};

// Each option of the objective: the same trajectory on all ranks as on one (every rank runs the
// one-rank reference on MPI_COMM_SELF), and a trajectory that is not the default's (the option
// acts).
TEST(RlObjective, EveryOptionIsTheSameAtAnyWorldSize) {
  const OptionCase cases[] = {
      {"dr_grpo", [](Config& c) {
         c.rl.advantage_estimator = AdvantageEstimator::dr_grpo;
         c.rl.scale_by_std = true;
         c.rl.loss_aggregation = LossAggregation::constant;
       }},
      {"rloo", [](Config& c) { c.rl.advantage_estimator = AdvantageEstimator::rloo; }},
      {"reinforce_plus_plus", [](Config& c) {
         c.rl.advantage_estimator = AdvantageEstimator::reinforce_plus_plus;
         c.rl.kl_in_reward = true;
       }},
      {"k1", [](Config& c) { c.rl.kl_estimator = KlEstimator::k1; }},
      {"k2", [](Config& c) { c.rl.kl_estimator = KlEstimator::k2; }},
      {"low_var_kl", [](Config& c) { c.rl.kl_estimator = KlEstimator::low_var_kl; }, false},
      {"kl_in_reward", [](Config& c) { c.rl.kl_in_reward = true; }},
      {"sequence", [](Config& c) { c.rl.loss_aggregation = LossAggregation::sequence; }},
      {"overlong filter", [](Config& c) { c.rl.overlong = Overlong::filter; }},
      {"overlong soft", [](Config& c) {
         c.rl.overlong = Overlong::soft;
         c.rl.overlong_buffer = 4;
       }},
      // In fp32 the sampler's and the forward's probabilities agree to rounding: a cap below 1
      // makes every token's weight the cap, which shows.
      {"tis", [](Config& c) { c.rl.tis_cap = 0.5; }},
      {"entropy", [](Config& c) { c.rl.entropy_coef = 0.05; }},
  };
  constexpr int kIterations = 3;
  Config base = small_config();
  base.rl.sft_steps = 10;   // some completions still run to max_new_tokens (overlong acts)
  const std::vector<Step> plain = run(base, MPI_COMM_SELF, kIterations);
  for (const OptionCase& k : cases) {
    SCOPED_TRACE(k.name);
    Config c = base;
    k.set(c);
    const std::vector<Step> world = run(c, MPI_COMM_WORLD, kIterations);
    const std::vector<Step> one = run(c, MPI_COMM_SELF, kIterations);
    expect_same_trajectory(world, one);
    bool signal = false;
    for (const Step& s : one) signal |= s.batch.reward_std > 0 && s.train.grad_norm > 0;
    EXPECT_TRUE(signal) << "no gradient in any iteration: the comparison proves little";
    double change = 0;
    for (int it = 0; it < kIterations; ++it)
      change = std::max({change, std::abs(one[it].train.loss - plain[it].train.loss),
                         std::abs(one[it].train.grad_norm - plain[it].train.grad_norm) / plain[it].train.grad_norm});
    if (k.changes_trajectory) {
      EXPECT_GT(change, 1e-3) << "the option did not change the trajectory";
    }
  }
}

// Three iterations of c at train.seq_len = 64 with train.packing (its rows checked to be 32
// positions long) and without.
std::pair<std::vector<Step>, std::vector<Step>> with_and_without_packing(Config c) {
  c.train.seq_len = 64;
  std::vector<Step> packed = run(c, MPI_COMM_WORLD, 3, 32);
  c.train.packing = false;
  return {std::move(packed), run(c, MPI_COMM_WORLD, 3)};
}

// train.packing: the train phase packs each minibatch's sequences into rows as long as the longest
// needs, rounded up to 32 (here 32 positions of train.seq_len = 64, two or three sequences per
// row); the trajectory is the unpacked one's to fp32 rounding, at any world size.
TEST(RlObjective, PackedRowsGiveTheUnpackedTrajectory) {
  const auto [packed, unpacked] = with_and_without_packing(small_config());
  expect_same_trajectory(packed, unpacked);
}

// With MoE layers train.packing keeps one sequence to a row (packing would change each
// micro-batch's load-balancing loss with the world size) but shortens the rows to the longest
// sequence's: padding is left out of that loss, so the trajectory is the full rows' to rounding,
// load-balancing loss included.
TEST(RlObjective, MoeRowsAsLongAsTheLongestGiveTheFullRowsTrajectory) {
  const auto [short_rows, full] = with_and_without_packing(small_moe_config());
  expect_same_trajectory(short_rows, full);
  for (int it = 0; it < 3; ++it) {
    EXPECT_GT(full[it].train.aux_loss, 1.0) << "iteration " << it;
    expect_close(short_rows[it].train.aux_loss, full[it].train.aux_loss, "aux_loss", it);
  }
}

// Each micro-batch's load-balancing loss counts for its share of the step's micro-batches over all
// ranks. With 5 prompts a minibatch the ranks' shares differ (3 + 2 at np 2, 2 + 1 + 1 + 1 at
// np 4) and a rank with fewer runs padding micro-batches to keep in step; a micro-batch holds one
// group, so the micro-batches are the same at any world size and so is the trajectory. (The
// weight was 1 / (the most micro-batches of a rank x ranks): at np 2 the loss read 3/4 of np 1's.)
TEST(RlObjective, MoeLoadBalancingIsTheSameAtAnyWorldSizeWithUnevenShares) {
  Config c = small_moe_config();
  c.rl.prompts_per_iteration = 10;
  c.train.micro_batch_size = c.rl.samples_per_prompt;
  const std::vector<Step> world = run(c, MPI_COMM_WORLD, 2);
  const std::vector<Step> one = run(c, MPI_COMM_SELF, 2);
  expect_same_trajectory(world, one);
  for (int it = 0; it < 2; ++it) {
    EXPECT_GT(one[it].train.aux_loss, 1.0) << "iteration " << it;
    expect_close(world[it].train.aux_loss, one[it].train.aux_loss, "aux_loss", it);
  }
}

// The same with expert parallelism (each rank's experts take the other ranks' tokens), where
// the ranks' sequences differ in length: after a longer warm-up most completions are short, a few
// run to 40 tokens, so a minibatch's rows are 32 or 64 positions as its longest sequence needs.
// Every rank takes that length (the longest over the ranks: a captured step must be of the same
// bucket on every rank), and its rows hold its own tokens, more or fewer than another rank's. The
// exchange carries each rank's real tokens only; the trajectory is the full rows' to rounding.
TEST(RlObjective, ExpertParallelRowsOfDifferentLengthsGiveTheFullRowsTrajectory) {
  Config c = small_moe_config();
  c.fsdp.expert_parallel = true;
  c.train.seq_len = 64;
  c.rollout.max_new_tokens = 40;
  c.rl.sft_steps = 15;
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // Each iteration's last row length, and the tokens of the rank's sequences, on every rank.
  auto run_recording = [&](const Config& config, std::vector<std::vector<int>>& lengths,
                           std::vector<std::vector<int>>& tokens) {
    Job job(config, MPI_COMM_WORLD);
    job.warm_up();
    std::vector<Step> out;
    for (int it = 0; it < 3; ++it) {
      RolloutBatch b = job.loop.rollout(it);
      TrainStats t = job.loop.train(b);
      const int mine = static_cast<int>(job.model.batch_seq_len());
      std::vector<int>& all = lengths.emplace_back(static_cast<std::size_t>(ranks));
      MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
      int held = 0;
      for (const Sequence& q : b.sequences) held += static_cast<int>(q.ids.size());
      std::vector<int>& each = tokens.emplace_back(static_cast<std::size_t>(ranks));
      MPI_Allgather(&held, 1, MPI_INT, each.data(), 1, MPI_INT, MPI_COMM_WORLD);
      out.push_back({std::move(b), t});
    }
    return out;
  };
  std::vector<std::vector<int>> short_lengths, full_lengths, short_tokens, full_tokens;
  const std::vector<Step> short_rows = run_recording(c, short_lengths, short_tokens);
  c.train.packing = false;
  const std::vector<Step> full = run_recording(c, full_lengths, full_tokens);
  expect_same_trajectory(short_rows, full);
  bool differ = false, shorter = false;
  for (int it = 0; it < 3; ++it) {
    expect_close(short_rows[it].train.aux_loss, full[it].train.aux_loss, "aux_loss", it);
    for (int r = 0; r < ranks; ++r) {
      shorter |= short_lengths[it][r] < 64;
      EXPECT_EQ(full_lengths[it][r], 64) << "iteration " << it << ", rank " << r;
      EXPECT_EQ(short_lengths[it][r] % 32, 0) << "iteration " << it << ", rank " << r;
      EXPECT_EQ(short_lengths[it][r], short_lengths[it][0]) << "iteration " << it << ": one row length on every rank";
      differ |= short_tokens[it][r] != short_tokens[it][0];
    }
  }
  EXPECT_TRUE(shorter) << "no row shorter than the full rows: the short rows are not exercised";
  if (ranks > 1) {
    EXPECT_TRUE(differ) << "the ranks held alike token counts in every iteration: the exchange of unequal token "
                           "counts is not exercised";
  }
}

// The loss aggregations' weights against their definitions: "token" divides each token's term by
// the minibatch's tokens (DAPO), "constant" by its sequences x rl.loss_tokens (Dr. GRPO); on the
// same rollout and weights (one minibatch, so its first update is the only one) every term is
// the same, and the two losses stand in the ratio of those denominators. The entropy bonus makes
// the terms nonzero where the advantages of a group would cancel.
TEST(RlObjective, TokenAndConstantAggregationsDivideByTheirDefinitions) {
  Config c = small_config();
  c.rl.minibatches = 1;
  c.rl.kl_coef = 0;
  c.rl.entropy_coef = 0.05;
  c.rl.sft_steps = 10;   // completions of different lengths
  c.rl.loss_aggregation = LossAggregation::token;
  const std::vector<Step> token = run(c, MPI_COMM_WORLD, 1);
  c.rl.loss_aggregation = LossAggregation::constant;
  c.rl.loss_tokens = 12;
  const std::vector<Step> constant = run(c, MPI_COMM_WORLD, 1);
  const RolloutBatch& b = token[0].batch;
  ASSERT_EQ(b.minibatch_tokens.size(), 1u);
  const double sequences = b.minibatch_sequences[0], tokens = b.minibatch_tokens[0];
  ASSERT_NE(tokens, sequences * c.rollout.max_new_tokens) << "every completion as long: the test proves less";
  ASSERT_GT(std::abs(token[0].train.loss), 1e-3);
  EXPECT_NEAR(token[0].train.loss / constant[0].train.loss, sequences * 12.0 / tokens, 1e-5 * sequences * 12.0 / tokens);
}

// After a short warm-up most groups of the sort task are all wrong (0/1 rewards): dynamic sampling
// keeps drawing rounds until every group of the batch has rewards that differ, so each trained
// group is informative; the rounds and dropped groups are the same at any world size.
TEST(RlObjective, DynamicSamplingFillsTheBatchWithInformativeGroups) {
  Config c = small_config();
  c.rl.partial_credit = false;   // 0/1 rewards: many groups all wrong (or all right)
  c.rl.sft_steps = 30;
  c.rl.dynamic_sampling = true;
  c.rl.max_sampling_rounds = 8;
  constexpr int kIterations = 3;
  const std::vector<Step> world = run(c, MPI_COMM_WORLD, kIterations);
  const std::vector<Step> one = run(c, MPI_COMM_SELF, kIterations);
  expect_same_trajectory(world, one);
  const int G = static_cast<int>(c.rl.samples_per_prompt);
  std::int64_t dropped = 0;
  int filled = 0;
  for (int it = 0; it < kIterations; ++it) {
    const RolloutBatch& b = world[it].batch;
    dropped += b.groups_dropped;
    ASSERT_EQ(b.reward.size() % G, 0u);
    // Rounds stop early only once the batch is full of informative groups; in a last round, the
    // earliest uninformative groups may fill the rest.
    if (b.sampling_rounds == c.rl.max_sampling_rounds) continue;
    ++filled;
    EXPECT_GT(b.sampling_rounds, 1) << "iteration " << it << ": one round held enough informative groups";
    for (std::size_t g = 0; g < b.reward.size(); g += G) {
      const auto [lo, hi] = std::minmax_element(b.reward.begin() + long(g), b.reward.begin() + long(g) + G);
      EXPECT_NE(*lo, *hi) << "an uninformative group was trained at iteration " << it;
    }
  }
  EXPECT_GT(dropped, 0) << "no group was dropped: the test proves little (make more groups uninformative)";
  EXPECT_GT(filled, 0) << "the rounds always ran out: the test proves little (make more groups informative)";
}

// The same job with dynamic sampling off trains on uninformative groups (the control of the test
// above), and reports one round and nothing dropped.
TEST(RlObjective, WithoutDynamicSamplingUninformativeGroupsAreTrained) {
  Config c = small_config();
  c.rl.partial_credit = false;
  c.rl.sft_steps = 20;
  const std::vector<Step> steps = run(c, MPI_COMM_WORLD, 3);
  const int G = static_cast<int>(c.rl.samples_per_prompt);
  int uninformative = 0;
  for (const Step& s : steps) {
    EXPECT_EQ(s.batch.sampling_rounds, 1);
    EXPECT_EQ(s.batch.groups_dropped, 0);
    for (std::size_t g = 0; g < s.batch.reward.size(); g += G) {
      const auto [lo, hi] =
          std::minmax_element(s.batch.reward.begin() + long(g), s.batch.reward.begin() + long(g) + G);
      uninformative += *lo == *hi ? 1 : 0;
    }
  }
  EXPECT_GT(uninformative, 0);
}

}  // namespace
}  // namespace shardrl
