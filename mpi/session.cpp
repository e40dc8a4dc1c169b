#include "mpi/session.hpp"

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/error.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {
namespace {
void abort_world(int exit_code) { MPI_Abort(MPI_COMM_WORLD, exit_code); }

constexpr const char* kProcessManagerVariables[] = {"PMIX_RANK", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"};

// Their values before MPI_Init, once a session has initialised MPI (empty until then).
std::map<std::string, std::optional<std::string>>& launch_environment_before_init() {
  static std::map<std::string, std::optional<std::string>> values;
  return values;
}
}  // namespace

const char* launch_environment(const char* name) {
  const auto& before = launch_environment_before_init();
  if (const auto it = before.find(name); it != before.end()) return it->second ? it->second->c_str() : nullptr;
  return std::getenv(name);
}

void install_mpi_error_handling() {
  set_job_abort(&abort_world);
  SHARDRL_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    for (const char* name : kProcessManagerVariables) {
      const char* value = std::getenv(name);
      launch_environment_before_init()[name] = value ? std::optional<std::string>(value) : std::nullopt;
    }
    int provided = 0;
    // MULTIPLE: an asynchronous checkpoint save's writer thread makes MPI calls (MPI-IO, on its
    // own communicator) beside the main thread's; everything else stays on the main thread.
    // A library that provides less is refused only by a job that asks for asynchronous saves.
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      SHARDRL_FATAL("MPI_Init_thread failed");
    owns_init_ = true;
  }
  install_mpi_error_handling();
  int rank = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  set_error_origin(rank, error_origin_host());
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_init_ && !finalized) MPI_Finalize();
}

}  // namespace shardrl
