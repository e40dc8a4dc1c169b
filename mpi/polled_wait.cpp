#include "mpi/polled_wait.hpp"

#include <sched.h>


#include <fmt/format.h>

#include "core/error.hpp"
#include "core/running_time.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

void wait_polled(MPI_Request& request, double timeout_s, const char* what) {
  RunningTime running;   // a suspended job's stop is not counted
  for (long polls = 0;; ++polls) {
    int done = 0;
    SHARDRL_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (polls > 1000) sched_yield();
    if ((polls & 1023) == 0 && running.seconds() > timeout_s)
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
