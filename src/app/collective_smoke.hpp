// One round of checked collectives on device buffers: the smoke job's work until the RL loop
// exists. Each collective's result is compared element by element with the value every rank
// can compute on its own.
#pragma once

#include <cstddef>

#include "config/config.hpp"
#include "mpi/communicator.hpp"

namespace shardrl {

struct SmokeRound {
  std::size_t elements = 0;        // per rank
  std::size_t mismatches = 0;      // over all four collectives, this rank
  double all_reduce_seconds = 0;
  double all_reduce_bus_gbps = 0;  // nccl-tests' busBw convention: 2(n-1)/n * bytes / time
};

// Collective over `comm`. Runs all_reduce, all_gather, reduce_scatter and broadcast of
// `elements` per rank in `precision`'s element type.
SmokeRound run_collective_round(Communicator& comm, Precision precision, std::size_t elements,
                                long iteration);

}  // namespace shardrl
