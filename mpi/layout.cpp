#include "mpi/layout.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    MpiComm dying(comm_);
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

// The host of this process: under a Slurm job step, Slurm's name for its node (slurmstepd sets
// SLURMD_NODENAME for every task it starts, also for Open MPI's daemons and their ranks), which
// on a real cluster is the machine. Where several slurmd share one machine (the multi-node test,
// tests/slurm/test_slurm_multinode.sh) every "node" has the machine's host name, and only Slurm's
// name tells them apart. Elsewhere the MPI processor name.
namespace {

std::string this_host() {
  const char* slurm_node = std::getenv("SLURMD_NODENAME");
  if (slurm_node != nullptr && *slurm_node != '\0') return slurm_node;
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  SHARDRL_CHECK_MPI(MPI_Get_processor_name(name, &len));
  return std::string(name, len);
}

}  // namespace

ProcessLayout ProcessLayout::discover(MPI_Comm world) {
  ProcessLayout l;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(world, &l.world_rank));
  SHARDRL_CHECK_MPI(MPI_Comm_size(world, &l.world_size));
  l.host = this_host();
  set_error_origin(l.world_rank, l.host);

  // Every rank learns every host.
  std::string hosts_text;
  auto gathered = gather_strings(world, l.host, 0);
  for (const auto& h : gathered) hosts_text += h + '\n';
  broadcast_string(world, hosts_text, 0);
  for (std::size_t pos = 0; pos < hosts_text.size();) {
    auto nl = hosts_text.find('\n', pos);
    l.hosts.push_back(hosts_text.substr(pos, nl - pos));
    pos = nl + 1;
  }

  // A node: the processes that share memory and name the same host. The host splits what the
  // MPI library may group as one (slurmds sharing a machine); on a cluster it splits nothing.
  MPI_Comm shared = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, l.world_rank, MPI_INFO_NULL, &shared));
  MpiComm shared_owner(shared);
  const int host_id = static_cast<int>(std::find(l.hosts.begin(), l.hosts.end(), l.host) - l.hosts.begin());
  MPI_Comm node = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_split(shared, host_id, l.world_rank, &node));
  l.node_comm = MpiComm(node);
  SHARDRL_CHECK_MPI(MPI_Comm_rank(node, &l.local_rank));
  SHARDRL_CHECK_MPI(MPI_Comm_size(node, &l.local_size));

  // A node is identified by the lowest world rank on it.
  int node_leader = l.world_rank;
  SHARDRL_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &node_leader, 1, MPI_INT, MPI_MIN, node));
  std::vector<int> leaders(l.world_size);
  SHARDRL_CHECK_MPI(MPI_Allgather(&node_leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world));
  std::vector<int> unique = leaders;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  l.node_count = static_cast<int>(unique.size());
  l.node_index = static_cast<int>(std::lower_bound(unique.begin(), unique.end(), node_leader) - unique.begin());
  return l;
}

std::string separate_worlds_problem(int world_size, const std::function<const char*(const char*)>& env) {
  if (world_size != 1) return "";
  // A deliberate sweep of one-process runs (srun -n 4 ... --set run.name=s$SLURM_PROCID).
  if (const char* allow = env("SHARDRL_SEPARATE_WORLDS"); allow != nullptr && std::string(allow) == "1") return "";
  const auto size_of = [&](const char* name) -> long {
    const char* text = env(name);
    if (text == nullptr) return -1;
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    return end == text ? -1 : n;
  };
  // The launcher's size where it says one (a PMI-2 or mpirun world the library did not join),
  // else srun's task count where no process-management variable says anything (no PMI at all;
  // PMIx gives no size in the environment, and a library started under it took it).
  long launched = std::max(size_of("PMI_SIZE"), size_of("OMPI_COMM_WORLD_SIZE"));
  const char* via = launched > 1 ? (size_of("PMI_SIZE") > 1 ? "PMI_SIZE" : "OMPI_COMM_WORLD_SIZE") : "";
  if (launched < 0 && env("PMIX_RANK") == nullptr && env("PMI_RANK") == nullptr && env("SLURM_PROCID") != nullptr) {
    launched = size_of("SLURM_STEP_NUM_TASKS");
    via = "SLURM_STEP_NUM_TASKS";
  }
  if (launched <= 1) return "";
  return fmt::format("the launcher started {} processes ({} = {}), but each is an MPI job of one process: launch "
                     "with srun --mpi=pmix (as slurm/run_shardrl.sh does) and an MPI built for it, or mpirun inside "
                     "the allocation (SHARDRL_SEPARATE_WORLDS=1 runs them as separate jobs on purpose)",
                     launched, via, launched);
}

}  // namespace shardrl
