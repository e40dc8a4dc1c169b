// The MPI session of a shardrl process: initialised first, finalised last. While it lives,
// a fatal error anywhere aborts the whole job through MPI_Abort.
#pragma once

#include <mpi.h>

namespace shardrl {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  MPI_Comm world() const { return MPI_COMM_WORLD; }

 private:
  bool owns_init_ = false;   // false when MPI was already initialised (e.g. by a test main)
};

// The environment variable `name` as the launcher set it, read before MPI_Init (which may set
// some itself: Open MPI's singleton init sets PMIX_RANK) for the process-management variables
// (PMIX_RANK, PMI_RANK, PMI_SIZE, OMPI_COMM_WORLD_SIZE), else now. nullptr when unset.
const char* launch_environment(const char* name);

// Installs MPI_Abort as the job-abort of shardrl::fatal and makes MPI calls on the world
// communicator return errors to SHARDRL_CHECK_MPI instead of aborting without a message.
void install_mpi_error_handling();

}  // namespace shardrl
