// Mixture-of-experts policies through the whole RL job, sharded with the rest or by expert
// parallelism, with and without LoRA: every rank follows one rank's trajectory.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fsdp/sharded_trainer.hpp"
#include "grpo_loop_test_support.hpp"

namespace shardrl {
namespace {

using namespace grpo_loop_test;

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

}  // namespace
}  // namespace shardrl
