// Binding ranks to devices (one GPU per node-local rank on GPU builds) and the per-rank device
// report printed at start. Collective over the world communicator.
#pragma once

#include <string>

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

// "rank 0/2  host a  node 0/1  local 0/2  <device>" lines for every rank, in rank order, on
// `root` ("" elsewhere).
std::string device_report(const ProcessLayout& layout, const DeviceBinding& binding, int root = 0);

}  // namespace shardrl
