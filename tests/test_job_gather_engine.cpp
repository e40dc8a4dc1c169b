// comm.gather_engine (job/policy.cpp): with "copy", and "auto" on GPU builds, at more than one
// rank the phase arena is the communicator's symmetric memory and the weights' all-gathers run on
// the copy engines. The job then computes what it computes with NCCL's kernels ("sm"), bit for
// bit, through warm-up steps and RL iterations, with the train step eager and captured; and the
// build report names the engine that was built.
#include <gtest/gtest.h>

#include <mpi.h>

#include <string>
#include <vector>

#include "core/captured_graph.hpp"
#include "rl_test_job.hpp"

#if defined(SHARDRL_ENABLE_CUDA)
#include <nccl.h>
#endif

namespace shardrl {
namespace {

// Copy-engine collectives on symmetric memory: NCCL 2.28 or later (and GPUs that map each other's
// memory, as the GPU machines' do).
#if defined(SHARDRL_ENABLE_CUDA)
constexpr bool kCopyEngineGathers = NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0);
#else
constexpr bool kCopyEngineGathers = false;
#endif

int world_size() {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  return ranks;
}

TEST(JobGatherEngine, BuildReportNamesTheEngineBuilt) {
  const bool copy_possible = kCopyEngineGathers && world_size() > 1;
  for (GatherEngine engine : {GatherEngine::automatic, GatherEngine::kernels}) {
    Config c = small_config();
    c.comm.gather_engine = engine;
    Job job(c, MPI_COMM_WORLD);
    const bool copy = engine == GatherEngine::automatic && copy_possible;
    EXPECT_EQ(job.arena.external(), copy);
    const std::string report = job.policy.build_report();
    EXPECT_NE(report.find(copy ? "weight all-gathers       copy engines" : "weight all-gathers       SM kernels"),
              std::string::npos)
        << report;
  }
}

TEST(JobGatherEngine, CopyEnginesGatherWhatKernelsGather) {
  if (!kCopyEngineGathers || world_size() == 1)
    GTEST_SKIP() << "copy-engine all-gathers need a GPU build with NCCL 2.28 or later, and more than one rank";
  for (bool graphs : {false, true}) {
    if (graphs && !CapturedGraph::native()) continue;
    std::vector<double> seen[2];
    std::vector<float> weights[2];
    for (int copy = 0; copy < 2; ++copy) {
      Config c = small_config();
      c.model.precision = Precision::bf16;
      c.rl.sft_steps = 3;
      c.comm.gather_engine = copy ? GatherEngine::copy : GatherEngine::kernels;
      if (graphs) c.train.cuda_graph = TrainGraph::full;
      Job job(c, MPI_COMM_WORLD);
      ASSERT_EQ(job.arena.external(), copy == 1);
      seen[copy] = job.warm_up();
      for (int it = 0; it < 2; ++it) {
        const TrainStats t = job.loop.train(job.loop.rollout(it));
        seen[copy].insert(seen[copy].end(), {t.loss, t.kl, t.grad_norm, t.tokens});
      }
      for (int u = 0; u < job.model.unit_count(); ++u) {
        const std::vector<float> slice = job.trainer.read_slice(u, SliceState::main);
        weights[copy].insert(weights[copy].end(), slice.begin(), slice.end());
      }
    }
    EXPECT_EQ(seen[0], seen[1]) << (graphs ? "captured" : "eager") << " train step";
    EXPECT_TRUE(weights[0] == weights[1]) << (graphs ? "captured" : "eager") << " train step: the weights differ";
    EXPECT_GT(weights[0].size(), 0u);
  }
}

}  // namespace
}  // namespace shardrl
