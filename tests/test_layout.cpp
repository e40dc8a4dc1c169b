// Process layout, device binding and the host exchanges, at np 1, 2 and 4 on one node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "mpi/device.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/layout.hpp"

namespace shardrl {
namespace {

TEST(Layout, RanksAndNodeOnOneHost) {
  ProcessLayout l = ProcessLayout::discover(MPI_COMM_WORLD);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(l.world_rank, rank);
  EXPECT_EQ(l.world_size, size);
  // All test ranks share this machine.
  EXPECT_EQ(l.local_rank, rank);
  EXPECT_EQ(l.local_size, size);
  EXPECT_EQ(l.node_count, 1);
  EXPECT_EQ(l.node_index, 0);
  ASSERT_EQ(static_cast<int>(l.hosts.size()), size);
  for (const auto& h : l.hosts) EXPECT_EQ(h, l.host);
  EXPECT_NE(l.node_comm.get(), MPI_COMM_NULL);
}

// Several slurmd on one machine: every rank has the machine's host name and shares its memory,
// but Slurm names each rank's node (SLURMD_NODENAME); the layout follows Slurm. Even ranks on
// "node-a", odd ranks on "node-b".
TEST(Layout, SlurmNodeNameSplitsRanksOfOneMachine) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* before = std::getenv("SLURMD_NODENAME");
  const std::string saved = before ? before : "";
  const std::string mine = rank % 2 == 0 ? "node-a" : "node-b";
  setenv("SLURMD_NODENAME", mine.c_str(), 1);
  ProcessLayout l = ProcessLayout::discover(MPI_COMM_WORLD);
  if (before) setenv("SLURMD_NODENAME", saved.c_str(), 1);
  else unsetenv("SLURMD_NODENAME");

  EXPECT_EQ(l.host, mine);
  EXPECT_EQ(l.node_count, std::min(size, 2));
  EXPECT_EQ(l.node_index, rank % 2);
  EXPECT_EQ(l.local_rank, rank / 2);
  EXPECT_EQ(l.local_size, rank % 2 == 0 ? (size + 1) / 2 : size / 2);
  ASSERT_EQ(static_cast<int>(l.hosts.size()), size);
  for (int r = 0; r < size; ++r) EXPECT_EQ(l.hosts[r], r % 2 == 0 ? "node-a" : "node-b") << "rank " << r;
  int node_size = 0;
  MPI_Comm_size(l.node_comm.get(), &node_size);
  EXPECT_EQ(node_size, l.local_size);
}

TEST(Layout, DeviceReportListsEveryRankInOrder) {
  ProcessLayout l = ProcessLayout::discover(MPI_COMM_WORLD);
  DeviceBinding b = bind_device(l);
  std::string report = device_report(l, b);
  if (l.world_rank != 0) {
    EXPECT_TRUE(report.empty());
    return;
  }
  std::size_t last = 0;
  for (int r = 0; r < l.world_size; ++r) {
    auto pos = report.find("rank " + std::to_string(r) + "/" + std::to_string(l.world_size) + "  host ");
    ASSERT_NE(pos, std::string::npos) << report;
    EXPECT_GE(pos, last);
    last = pos;
  }
}

TEST(HostExchange, BroadcastGatherAndAgree) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string text = rank == size - 1 ? std::string(100000, 'x') + "end" : "";
  broadcast_string(MPI_COMM_WORLD, text, size - 1);
  EXPECT_EQ(text.size(), 100003u);
  EXPECT_EQ(text.substr(100000), "end");

  auto all = gather_strings(MPI_COMM_WORLD, std::string(rank, 'a' + rank), 0);
  if (rank == 0) {
    ASSERT_EQ(static_cast<int>(all.size()), size);
    for (int r = 0; r < size; ++r) EXPECT_EQ(all[r], std::string(r, 'a' + r));
  } else {
    EXPECT_TRUE(all.empty());
  }
  // The path of totals past 2 GiB (point to point, in pieces), on small texts.
  const std::string mine = std::string(static_cast<std::size_t>(5 * rank + 1), 'k') + std::to_string(rank);
  auto pieces = gather_strings(MPI_COMM_WORLD, mine, size - 1, /*gatherv_below=*/0, /*piece=*/3);
  if (rank == size - 1) {
    ASSERT_EQ(static_cast<int>(pieces.size()), size);
    for (int r = 0; r < size; ++r)
      EXPECT_EQ(pieces[r], std::string(static_cast<std::size_t>(5 * r + 1), 'k') + std::to_string(r));
  } else {
    EXPECT_TRUE(pieces.empty());
  }
  EXPECT_FALSE(any_rank(MPI_COMM_WORLD, false));
  EXPECT_TRUE(any_rank(MPI_COMM_WORLD, rank == size - 1));
}

}  // namespace
}  // namespace shardrl

namespace shardrl {
namespace {

// `srun` without --mpi=pmix starts each task as an MPI job of one process: each would train
// alone on GPU 0 and write the same run. Refused by the sizes the launcher gave (srun's task count
// where no process-management variable is set; PMI-2's size, which a library without PMI-2 did
// not join); not with PMIx (which gives no size: the library took it), under a world of several,
// for a one-task step, or with SHARDRL_SEPARATE_WORLDS=1 (a sweep on purpose).
TEST(Layout, SeparateWorldsUnderSrunAreRefused) {
  std::map<std::string, std::string> env;
  const auto get = [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(separate_worlds_problem(1, get), "");   // no Slurm
  env = {{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "2"}};
  const std::string problem = separate_worlds_problem(1, get);
  EXPECT_NE(problem.find("the launcher started 4 processes (SLURM_STEP_NUM_TASKS = 4), but each is an MPI job of one"),
            std::string::npos)
      << problem;
  EXPECT_NE(problem.find("srun --mpi=pmix"), std::string::npos) << problem;
  EXPECT_EQ(separate_worlds_problem(4, get), "") << "the tasks formed one world";
  env["PMIX_RANK"] = "2";
  EXPECT_EQ(separate_worlds_problem(1, get), "") << "PMIx: the library took it";
  env.erase("PMIX_RANK");
  // srun --mpi=pmi2 with a library that cannot use PMI-2 (Open MPI 5): its size says so.
  env["PMI_RANK"] = "2";
  env["PMI_SIZE"] = "4";
  EXPECT_NE(separate_worlds_problem(1, get).find("(PMI_SIZE = 4)"), std::string::npos);
  env["PMI_SIZE"] = "1";
  EXPECT_EQ(separate_worlds_problem(1, get), "") << "a PMI world of one";
  env.erase("PMI_RANK");
  env.erase("PMI_SIZE");
  env["SHARDRL_SEPARATE_WORLDS"] = "1";
  EXPECT_EQ(separate_worlds_problem(1, get), "") << "a sweep on purpose";
  env.erase("SHARDRL_SEPARATE_WORLDS");
  env["SLURM_STEP_NUM_TASKS"] = "1";
  EXPECT_EQ(separate_worlds_problem(1, get), "") << "a one-task step";
}

}  // namespace
}  // namespace shardrl

namespace shardrl {
namespace {

// How a node's ranks share out the GPUs they see. Plain mpirun: every rank sees the node's GPUs
// and takes its local rank's. Slurm's --gpus-per-task=1: each sees its own one. --gpus-per-task=2
// or --gpu-bind=closest: groups of ranks see their own few and share them out; such layouts were
// refused ("runs 8 ranks but has 4 GPUs"). More ranks than a group's GPUs: refused, named.
TEST(Layout, RanksShareOutTheGpusTheySee) {
  const std::vector<std::string> node = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"};
  const std::vector<std::vector<std::string>> plain(4, node);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(choose_visible_gpu(plain, r).device, r);
  std::vector<std::vector<std::string>> own;
  for (const std::string& g : node) own.push_back({g});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(choose_visible_gpu(own, r).device, 0);
  // --gpu-bind=closest: ranks 0, 2, 4, 6 see the first two GPUs, ranks 1, 3, 5, 7 the others.
  const std::vector<std::string> near0 = {node[0], node[1]}, near1 = {node[2], node[3]};
  const std::vector<std::vector<std::string>> closest = {near0, near1, near0, near1};
  EXPECT_EQ(choose_visible_gpu(closest, 0).device, 0);
  EXPECT_EQ(choose_visible_gpu(closest, 1).device, 0);
  EXPECT_EQ(choose_visible_gpu(closest, 2).device, 1);
  EXPECT_EQ(choose_visible_gpu(closest, 3).device, 1);
  const std::vector<std::vector<std::string>> crowded = {near0, near0, near0};
  const GpuChoice third = choose_visible_gpu(crowded, 2);
  EXPECT_EQ(third.device, -1);
  EXPECT_EQ(third.problem, "3 of them see the same 2 GPU(s) (0000:18:00.0, 0000:2a:00.0)");
  EXPECT_EQ(choose_visible_gpu(crowded, 1).device, 1);
  // The same set in another order (CUDA_VISIBLE_DEVICES=1,0 on one rank): one group all the same,
  // each rank's pick found in its own order.
  const std::vector<std::vector<std::string>> reordered = {near0, {node[1], node[0]}};
  EXPECT_EQ(choose_visible_gpu(reordered, 0).device, 0);   // node[0], its ordinal 0
  EXPECT_EQ(choose_visible_gpu(reordered, 1).device, 0);   // node[1], its ordinal 0 in its order
  // Unsorted bus ids seen alike: local rank k keeps ordinal k.
  const std::vector<std::vector<std::string>> unsorted(2, std::vector<std::string>{node[3], node[0]});
  EXPECT_EQ(choose_visible_gpu(unsorted, 0).device, 0);
  EXPECT_EQ(choose_visible_gpu(unsorted, 1).device, 1);
}

}  // namespace
}  // namespace shardrl
