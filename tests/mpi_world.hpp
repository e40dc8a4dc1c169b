// This process's rank and the world's size, for the MPI tests.
#pragma once

#include <mpi.h>

namespace shardrl::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace shardrl::test
