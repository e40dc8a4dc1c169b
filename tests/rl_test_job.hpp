// A small RL job for tests, built through the job layer as `shardrl train` builds it (arena,
// model, trainer, loop), on any communicator, and the configuration the RL-loop and checkpoint
// tests share.
#pragma once

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "job/policy.hpp"
#include "mpi/communicator.hpp"

namespace shardrl {

inline CommBackendKind backend() { return has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi; }

inline Config small_config() {
  Config c;
  c.model.precision = Precision::fp32;
  c.train.micro_batch_size = 4;
  c.train.seq_len = 32;
  c.optim.lr = 1e-3;
  c.rollout.max_new_tokens = 8;
  c.rl.prompts_per_iteration = 8;
  c.rl.samples_per_prompt = 4;
  c.rl.minibatches = 2;
  c.rl.difficulty = 2;          // sort two digits: a short warm-up gets some answers right
  c.rl.sft_steps = 30;
  c.rl.sft_batch_size = 16;
  c.rl.sft_lr = 3e-3;
  c.rl.kl_coef = 0.1;
  c.rl.partial_credit = true;   // graded rewards: groups differ from the first iteration on
  return c;
}

// small_config with a mixture-of-experts layer: 2 layers, the second MoE (4 experts, top 2, a
// shared expert), a short warm-up.
inline Config small_moe_config() {
  Config c = small_config();
  c.model.preset = "custom";
  c.model.n_layers = 2;
  c.model.n_experts = 4;
  c.model.top_k = 2;
  c.model.d_ff_expert = 48;
  c.model.moe_every = 2;
  c.model.shared_expert = true;
  c.model.aux_loss_coef = 0.01;
  c.rl.sft_steps = 3;
  return c;
}

// A whole job on `comm`, built by the job layer's one builder (job/policy.hpp), as `shardrl
// train` builds it; the members name its parts.
struct Job {
  std::unique_ptr<Communicator> comm;
  Policy policy;
  const Config& config;
  PhaseArena& arena;
  Transformer& model;
  ShardedTrainer& trainer;
  GrpoLoop& loop;

  Job(const Config& c, MPI_Comm mpi_comm)
      : comm(make_communicator(backend(), mpi_comm, 120.0)), policy(c, *comm, PolicyUse{true, false, {}}),
        config(policy.config()), arena(policy.arena()), model(policy.model()), trainer(policy.trainer()),
        loop(policy.loop()) {}
  std::vector<double> warm_up() {
    std::vector<double> losses;
    if (config.rl.sft_lr > 0) trainer.set_peak_lr(static_cast<float>(config.rl.sft_lr));
    for (std::int64_t s = 0; s < config.rl.sft_steps; ++s) losses.push_back(loop.warmup_step(s).loss);
    trainer.set_peak_lr(static_cast<float>(config.optim.lr));
    if (config.rl.kl_coef > 0) trainer.snapshot_reference();
    return losses;
  }
};

}  // namespace shardrl
