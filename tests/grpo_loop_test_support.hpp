// What the RL-loop tests (test_grpo_loop*.cpp) record of a job's iterations, and the fp32
// tolerance they compare two trajectories with.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "rl/grpo_loop.hpp"
#include "rl_test_job.hpp"

namespace shardrl::grpo_loop_test {

struct Record {
  double reward, reward_std, loss, kl, grad_norm, clip_frac, entropy, aux_loss;
};

inline std::vector<Record> trajectory(Job& job, int iterations) {
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
inline void expect_close(double got, double want, const char* what, int it) {
  EXPECT_LE(std::abs(got - want), 1e-4 * std::abs(want) + 1e-7)
      << what << " at iteration " << it << ": " << got << " vs " << want;
}

}  // namespace shardrl::grpo_loop_test
