// The MPI check macro: a failing MPI call aborts the whole job with rank, host, call and place.
#pragma once

#include <mpi.h>

namespace shardrl {
[[noreturn]] void fail_mpi(int status, const char* call, const char* file, int line);
}

#define SHARDRL_CHECK_MPI(call)                                                     \
  do {                                                                              \
    int shardrl_mpi_status_ = (call);                                               \
    if (shardrl_mpi_status_ != MPI_SUCCESS)                                         \
      ::shardrl::fail_mpi(shardrl_mpi_status_, #call, __FILE__, __LINE__);          \
  } while (0)
