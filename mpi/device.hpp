// Binding ranks to devices (one GPU per node-local rank on GPU builds) and the per-rank device
// report printed at start. Collective over the world communicator.
#pragma once

#include <string>
#include <vector>

#include "mpi/layout.hpp"

namespace shardrl {

struct DeviceBinding {
  int device_id = -1;           // CUDA device of this rank; -1 on CPU builds
  std::string description;      // one line for the report
};

// Chooses this rank's device. When the node's ranks cannot each get their own GPU, every
// rank stops with an error naming the node, its rank count and its GPU count (exit code 2 via
// InputError on every rank).
DeviceBinding bind_device(const ProcessLayout& layout);

// Which of the GPUs it sees local rank `local_rank` of a node takes (an index into its own
// list), given what every rank of the node sees (`seen[r]`: local rank r's devices, as PCI bus
// ids in CUDA's order). Ranks that see the same devices (in any order) share them out in
// local-rank order, in the order the first of them sees:
// plain mpirun (every rank sees the node's GPUs), Slurm's --gpus-per-task=1 (each its own one),
// --gpus-per-task=2 or --gpu-bind=closest (groups of ranks, each group its few). -1 with
// `problem` set when a group has more ranks than devices.
struct GpuChoice {
  int device = -1;
  std::string problem;
};
GpuChoice choose_visible_gpu(const std::vector<std::vector<std::string>>& seen, int local_rank);

// "rank 0/2  host a  node 0/1  local 0/2  <device>" lines for every rank, in rank order, on
// `root` ("" elsewhere).
std::string device_report(const ProcessLayout& layout, const DeviceBinding& binding, int root = 0);

}  // namespace shardrl
