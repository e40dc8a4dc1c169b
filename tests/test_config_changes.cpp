// What a resume compares: every differing key listed, the keys that shape the run's trajectory
// marked so, and a key that both configurations leave unread marked as read by neither (a run
// saved before such a key was refused at load may drop it to resume).
#include <gtest/gtest.h>

#include <algorithm>

#include "config/changes.hpp"

namespace shardrl {
namespace {

const ConfigChange* find_change(const std::vector<ConfigChange>& changes, const std::string& key) {
  const auto it = std::find_if(changes.begin(), changes.end(), [&](const ConfigChange& c) { return c.key == key; });
  return it == changes.end() ? nullptr : &*it;
}

TEST(ConfigChanges, TrajectoryKeysAreMarkedAndOthersFree) {
  Config before, after;
  after.run.seed = before.run.seed + 1;
  after.run.iterations = before.run.iterations + 5;
  const std::vector<ConfigChange> changes = config_changes(before, after);
  ASSERT_EQ(changes.size(), 2u);
  const ConfigChange* seed = find_change(changes, "run.seed");
  ASSERT_NE(seed, nullptr);
  EXPECT_FALSE(seed->keeps_trajectory);
  EXPECT_FALSE(seed->read_by_neither);
  const ConfigChange* iterations = find_change(changes, "run.iterations");
  ASSERT_NE(iterations, nullptr);
  EXPECT_TRUE(iterations->keeps_trajectory);
}

// The evaluation changes no state (its draws are keyed apart), nor does the reward command's
// timeout: adding an evaluation to a running job resumes freely. model.init_from seeds a fresh
// run only (a requeued job may copy the model to node scratch).
TEST(ConfigChanges, EvaluationTimeoutsAndInitFromAreFree) {
  Config before, after;
  after.rl.eval_interval = 5;
  after.rl.eval_samples = 8;
  after.rl.eval_dataset = "eval.jsonl";
  after.rl.reward_timeout_s = before.rl.reward_timeout_s + 1;
  after.model.init_from = "other_model";
  const std::vector<ConfigChange> changes = config_changes(before, after);
  EXPECT_EQ(changes.size(), 5u);
  for (const ConfigChange& c : changes) EXPECT_TRUE(c.keeps_trajectory) << c.key;
}

// The rollout's graphs draw the same tokens as its eager steps: free. A captured train step runs
// the head on every token, an eager one on the scored tokens only (different rounding): a
// trajectory change.
TEST(ConfigChanges, TheTrainStepsGraphsChangeTheTrajectoryTheRolloutsDoNot) {
  Config before, after;
  after.train.cuda_graph = TrainGraph::full;
  after.rollout.cuda_graph = RolloutGraph::decode;
  const std::vector<ConfigChange> changes = config_changes(before, after);
  ASSERT_EQ(changes.size(), 2u);
  const ConfigChange* train = find_change(changes, "train.cuda_graph");
  ASSERT_NE(train, nullptr);
  EXPECT_FALSE(train->keeps_trajectory);
  const ConfigChange* rollout = find_change(changes, "rollout.cuda_graph");
  ASSERT_NE(rollout, nullptr);
  EXPECT_TRUE(rollout->keeps_trajectory);
}

// rl.difficulty is read by generated tasks only: with a dataset task on both sides its removal
// changes nothing; on a generated task, or where the task itself changes, it does.
TEST(ConfigChanges, AKeyBothConfigurationsLeaveUnreadIsReadByNeither) {
  Config before, after;
  before.rl.task = after.rl.task = "jsonl";
  before.rl.difficulty = after.rl.difficulty + 2;
  const ConfigChange* dropped = find_change(config_changes(before, after), "rl.difficulty");
  ASSERT_NE(dropped, nullptr);
  EXPECT_FALSE(dropped->keeps_trajectory);
  EXPECT_TRUE(dropped->read_by_neither);

  before.rl.task = after.rl.task = "add";
  const ConfigChange* read = find_change(config_changes(before, after), "rl.difficulty");
  ASSERT_NE(read, nullptr);
  EXPECT_FALSE(read->read_by_neither);

  before.rl.task = "jsonl";   // unread before, read after
  const ConfigChange* now_read = find_change(config_changes(before, after), "rl.difficulty");
  ASSERT_NE(now_read, nullptr);
  EXPECT_FALSE(now_read->read_by_neither);
}

}  // namespace
}  // namespace shardrl
