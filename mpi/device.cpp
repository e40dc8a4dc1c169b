#include "mpi/device.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/mpi_check.hpp"

#if defined(SHARDRL_ENABLE_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.hpp"
#endif

namespace shardrl {
namespace {

#if defined(SHARDRL_ENABLE_CUDA)
std::string pci_bus_id(int device) {
  char id[64] = {0};
  SHARDRL_CHECK_CUDA(cudaDeviceGetPCIBusId(id, sizeof id, device));
  return id;
}

// A rank may see several GPUs (plain mpirun: pick by local rank) or exactly one (Slurm's
// --gpus-per-task): then the node's ranks must have been given different GPUs.
std::string choose_gpu(const ProcessLayout& l, DeviceBinding& b) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  std::string problem;
  if (count == 0) {
    problem = fmt::format("node {} (host {}): no CUDA device visible to rank {}", l.node_index,
                          l.host, l.world_rank);
  } else if (count >= l.local_size) {
    b.device_id = l.local_rank;
  } else if (count == 1) {
    b.device_id = 0;
  } else {
    problem = fmt::format("node {} (host {}) runs {} ranks but has {} GPUs: shardrl needs one GPU per rank",
                          l.node_index, l.host, l.local_size, count);
  }
  std::string bus = problem.empty() ? pci_bus_id(b.device_id) : std::string();
  // Ranks of one node must not share a GPU.
  auto buses = gather_strings(l.node_comm.get(), bus, 0);
  std::string clash;
  for (std::size_t i = 0; i < buses.size(); ++i)
    for (std::size_t j = i + 1; j < buses.size(); ++j)
      if (!buses[i].empty() && buses[i] == buses[j] && clash.empty())
        clash = fmt::format("node {} (host {}) runs {} ranks but they share GPUs (local ranks {} and {} both see {}): shardrl needs one GPU per rank",
                            l.node_index, l.host, l.local_size, i, j, buses[i]);
  broadcast_string(l.node_comm.get(), clash, 0);
  if (problem.empty()) problem = clash;
  if (problem.empty()) {
    SHARDRL_CHECK_CUDA(cudaSetDevice(b.device_id));
    cudaDeviceProp prop{};
    SHARDRL_CHECK_CUDA(cudaGetDeviceProperties(&prop, b.device_id));
    b.description = fmt::format("GPU {} {} ({}, {:.1f} GiB, sm_{}{})", b.device_id, prop.name, bus,
                                prop.totalGlobalMem / double(1ull << 30), prop.major, prop.minor);
  }
  return problem;
}
#endif

}  // namespace

DeviceBinding bind_device([[maybe_unused]] const ProcessLayout& layout) {
  DeviceBinding b;
  std::string problem;
#if defined(SHARDRL_ENABLE_CUDA)
  problem = choose_gpu(layout, b);
#else
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  b.description = fmt::format("CPU (no GPU build), OPENBLAS_NUM_THREADS={}", threads ? threads : "unset");
#endif
  // Every rank learns whether any rank failed, so all stop together.
  auto problems = gather_strings(MPI_COMM_WORLD, problem, 0);
  std::string all;
  for (const auto& p : problems)
    if (!p.empty() && all.find(p) == std::string::npos) all += (all.empty() ? "" : "\n") + p;
  broadcast_string(MPI_COMM_WORLD, all, 0);
  if (!all.empty()) throw InputError(all);
  return b;
}

std::string device_report(const ProcessLayout& l, const DeviceBinding& b, int root) {
  std::string line = fmt::format("rank {}/{}  host {}  node {}/{}  local rank {}/{}  {}", l.world_rank,
                                 l.world_size, l.host, l.node_index, l.node_count, l.local_rank,
                                 l.local_size, b.description);
  auto lines = gather_strings(MPI_COMM_WORLD, line, root);
  std::string out;
  for (const auto& s : lines) out += s + "\n";
  return out;
}

}  // namespace shardrl
