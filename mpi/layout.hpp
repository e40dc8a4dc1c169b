// Where each process of the job runs: world rank/size, node-local rank/size, node and host.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace shardrl {

// Move-only owner of a communicator created by shardrl (never MPI_COMM_WORLD).
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm();
  MpiComm(MpiComm&& other) noexcept : comm_(other.comm_) { other.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

struct ProcessLayout {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;   // rank among the processes on this node
  int local_size = 1;
  int node_index = 0;   // nodes numbered in order of their lowest world rank
  int node_count = 1;
  std::string host;                 // Slurm's node name in a Slurm job step, else the MPI processor name
  std::vector<std::string> hosts;   // host of every world rank
  MpiComm node_comm;                // the processes sharing this node's memory and host

  // Collective over `world`.
  static ProcessLayout discover(MPI_Comm world);
};

// A world of one process that the launcher started as one process of several: `srun` without a
// process-management interface the MPI library takes (`--mpi=pmix`; or `--mpi=pmi2` with a
// library without PMI-2), where each task becomes a one-rank job of its own, all training alone
// on GPU 0 and writing the same run. The problem (naming the count, where it was read, and the
// fix), or "". SHARDRL_SEPARATE_WORLDS=1 allows it (a sweep of one-process runs). `env` reads an
// environment variable as the launcher set it (mpi/session.hpp's launch_environment).
std::string separate_worlds_problem(int world_size, const std::function<const char*(const char*)>& env);

}  // namespace shardrl
