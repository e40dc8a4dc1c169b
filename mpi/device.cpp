#include "mpi/device.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
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

// The node's ranks share out what they see (choose_visible_gpu); then no two may have taken the
// same GPU (ranks that see overlapping sets).
std::string choose_gpu(const ProcessLayout& l, DeviceBinding& b) {
  int count = 0;
  std::string problem;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    problem = fmt::format("node {} (host {}): rank {} cannot count its CUDA devices: {} ({})", l.node_index, l.host,
                          l.world_rank, cudaGetErrorString(err), cudaGetErrorName(err));
    count = 0;
  } else if (count == 0) {
    problem = fmt::format("node {} (host {}): no CUDA device visible to rank {}", l.node_index,
                          l.host, l.world_rank);
  }
  std::string seen;
  for (int d = 0; d < count; ++d) seen += (d ? "," : "") + pci_bus_id(d);
  std::vector<std::string> all = gather_strings(l.node_comm.get(), seen, 0);
  std::string joined;
  for (const std::string& s : all) joined += s + ";";
  broadcast_string(l.node_comm.get(), joined, 0);
  std::vector<std::vector<std::string>> node_seen;
  for (std::size_t at = 0; at < joined.size();) {
    const std::size_t end = joined.find(';', at);
    std::vector<std::string> ids;
    for (std::size_t p = at; p < end;) {
      const std::size_t comma = std::min(joined.find(',', p), end);
      ids.push_back(joined.substr(p, comma - p));
      p = comma + 1;
    }
    node_seen.push_back(std::move(ids));
    at = end + 1;
  }
  if (problem.empty()) {
    const GpuChoice choice = choose_visible_gpu(node_seen, l.local_rank);
    b.device_id = choice.device;
    if (!choice.problem.empty())
      problem = fmt::format("node {} (host {}) runs {} ranks: {}: shardrl needs one GPU per rank", l.node_index, l.host,
                            l.local_size, choice.problem);
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

GpuChoice choose_visible_gpu(const std::vector<std::vector<std::string>>& seen, int local_rank) {
  // Groups by the set seen, whatever each rank's CUDA order; the group's ranks take its GPUs in
  // its first rank's order (so that where all see one order, local rank k takes ordinal k), each
  // found in its own list.
  const auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const std::vector<std::string>& mine = seen.at(static_cast<std::size_t>(local_rank));
  const std::vector<std::string> key = sorted(mine);
  const std::vector<std::string>* set = nullptr;
  int index = 0, sharing = 0;
  for (int r = 0; r < static_cast<int>(seen.size()); ++r)
    if (sorted(seen[r]) == key) {
      if (set == nullptr) set = &seen[r];
      if (r < local_rank) ++index;
      ++sharing;
    }
  GpuChoice out;
  if (index < static_cast<int>(set->size()))
    out.device = static_cast<int>(std::find(mine.begin(), mine.end(), (*set)[index]) - mine.begin());
  else
    out.problem = fmt::format("{} of them see the same {} GPU(s) ({})", sharing, set->size(), fmt::join(*set, ", "));
  return out;
}

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
