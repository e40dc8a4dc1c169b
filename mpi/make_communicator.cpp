// Chooses the collectives backend compiled into this build.
#include <fmt/format.h>

#include "core/error.hpp"
#include "mpi/communicator.hpp"
#include "mpi/mpi_communicator.hpp"
#if defined(SHARDRL_ENABLE_CUDA)
#include "mpi/nccl_communicator.hpp"
#endif

namespace shardrl {

bool has_backend(CommBackendKind kind) {
#if defined(SHARDRL_ENABLE_CUDA)
  return kind == CommBackendKind::nccl;
#else
  return kind == CommBackendKind::mpi;
#endif
}

std::unique_ptr<Communicator> make_communicator(CommBackendKind kind, MPI_Comm comm, double timeout_s) {
  if (!has_backend(kind))
    SHARDRL_FATAL(fmt::format("collectives backend '{}' is not compiled into this build",
                              kind == CommBackendKind::nccl ? "nccl" : "mpi"));
#if defined(SHARDRL_ENABLE_CUDA)
  return std::make_unique<NcclCommunicator>(comm, timeout_s);
#else
  return std::make_unique<MpiCommunicator>(comm, timeout_s);
#endif
}

}  // namespace shardrl
