// The checks that need the job's shape (config/load.hpp check_for_job): the world size, and
// whether the job trains or only samples (generate, tokenize).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/load.hpp"
#include "config_test_builds.hpp"

namespace shardrl {
namespace {

TEST(ConfigJobChecks, DebugRankWithinTheJob) {
  LoadedConfig l = load_config("[debug]\nfail_rank = 1\n", "f", {}, kCpu);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(check_for_job(l, 2).empty());
  auto errors = check_for_job(l, 1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "f:2:13: debug.fail_rank = 1 but the job has 1 rank (0..0)");
}

// Greedy rollouts train nothing under the estimators that compare a prompt's samples, and leave
// top_k and top_p unread: refused for a job that trains, not for one that only samples
// (generate's --temperature 0 over a config that samples with top_k is a greedy look).
TEST(ConfigJobChecks, GreedyRolloutsAreCheckedForTrainingJobsOnly) {
  LoadedConfig l = load_config("[rollout]\ntemperature = 0.0\ntop_k = 5\ntop_p = 0.9\n", "f", {}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_TRUE(check_for_job(l, 1, /*trains=*/false).empty());
  const std::vector<std::string> errors = check_for_job(l, 1);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].rfind("f:2:15: rollout.temperature = 0 draws each prompt's samples alike (greedy)", 0), 0u)
      << errors[0];
  EXPECT_EQ(errors[1], "f:3:9: rollout.top_k is not read with rollout.temperature = 0 (greedy decoding)");
  EXPECT_EQ(errors[2], "f:4:9: rollout.top_p is not read with rollout.temperature = 0 (greedy decoding)");
  l = load_config("[rollout]\ntemperature = 0.0\n[rl]\nadvantage_estimator = \"reinforce_plus_plus\"\n", "f", {}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_TRUE(check_for_job(l, 1).empty()) << "REINFORCE++ whitens over the batch";
}

}  // namespace
}  // namespace shardrl
