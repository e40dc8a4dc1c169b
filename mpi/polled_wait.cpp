#include "mpi/polled_wait.hpp"

#include <sched.h>

#include <chrono>

#include <fmt/format.h>

#include "core/error.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

void wait_polled(MPI_Request& request, double timeout_s, const char* what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  for (long polls = 0;; ++polls) {
    int done = 0;
    SHARDRL_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (polls > 1000) sched_yield();
    if ((polls & 1023) == 0 && std::chrono::duration<double>(clock::now() - start).count() > timeout_s)
      SHARDRL_FATAL(fmt::format("{} did not complete within comm.timeout_s = {} s: a peer rank failed or is not "
                                "taking part in this collective",
                                what, timeout_s));
  }
}

void all_reduce_polled(MPI_Comm comm, void* values, int count, MPI_Datatype type, MPI_Op op, double timeout_s,
                       const char* what) {
  MPI_Request request;
  SHARDRL_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, values, count, type, op, comm, &request));
  wait_polled(request, timeout_s, what);
}

}  // namespace shardrl
