// Waiting for a nonblocking MPI operation without hanging: the request is polled (a short spin,
// then yielding, since ranks may share cores) and the job stops with `what` named when it has not
// completed within `timeout_s` (comm.timeout_s): a peer rank failed or is not taking part.
#pragma once

#include <mpi.h>

namespace shardrl {

void wait_polled(MPI_Request& request, double timeout_s, const char* what);

// MPI_Allreduce in place, waited for as above: an agreement a rank that never arrives cannot hang.
void all_reduce_polled(MPI_Comm comm, void* values, int count, MPI_Datatype type, MPI_Op op, double timeout_s,
                       const char* what);

}  // namespace shardrl
