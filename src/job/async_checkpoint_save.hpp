// checkpoint.async: a save pauses training only to copy this rank's state into host memory
// (page-locked in GPU builds); a background thread then writes and commits the file, on its own
// duplicate of the job's communicator, while the next iterations run. The commit is the
// synchronous save's (a `.partial` name, MPI_File_sync and fsync, rename, then `latest`, then
// retention), so a job killed at any moment leaves every checkpoint complete or absent. At most
// one save is in flight: the next save, the end of the job and a stop by a signal wait for it.
//
// Threads: the writer makes MPI calls (parallel HDF5's MPI-IO, the commit's agreement) on its
// communicator while the main thread makes its own, which needs MPI_THREAD_MULTIPLE (the
// session asks for it; a library without it is refused when the job starts). HDF5 itself is
// not thread-safe: while a save is in flight only the writer calls it (the job touches HDF5 only
// to save and, before the loop, to load).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/kokkos.hpp"
#include "job/job_checkpoint.hpp"
#include "job/policy.hpp"
#include "mpi/layout.hpp"

namespace shardrl {

class AsyncCheckpointSave {
 public:
  // Why this process cannot save in the background (its MPI library lacks MPI_THREAD_MULTIPLE),
  // or "": what the job checks with the config, before anything starts.
  static std::string unavailable();
  // Collective over `comm` (duplicates it). Allocates the snapshot once: every state slice a
  // checkpoint of `policy` holds (state_bytes()). Where unavailable(): InputError.
  AsyncCheckpointSave(Policy& policy, MPI_Comm comm);
  // Waits for the writer, whose error (if any) is then lost: destroyed after wait(), or while
  // an error unwinds every rank alike.
  ~AsyncCheckpointSave();
  AsyncCheckpointSave(const AsyncCheckpointSave&) = delete;
  AsyncCheckpointSave& operator=(const AsyncCheckpointSave&) = delete;

  struct Finished {
    std::int64_t iteration = 0;   // the file is iter_<iteration>.h5
    double seconds = 0;           // from the end of the pause to the commit
  };

  // Collective, with no save in flight (wait() first). Copies the state into the snapshot and
  // starts writing <dir>/iter_<iterations_done>.h5. Returns the seconds the copy took on the
  // slowest rank: the pause of training.
  double start(const std::filesystem::path& dir, const JobPosition& position, const std::string& config_toml);
  // Collective. When every rank's writer has finished: joins it and returns what it saved, or
  // throws its InputError (the writer's collectives made it the same on every rank). nullopt
  // while one is still writing, or when none was started since the last poll/wait.
  std::optional<Finished> poll();
  // Waits for the save in flight (a local join; the writers' own collectives pace it); then as
  // poll(): every rank throws the writer's InputError alike.
  std::optional<Finished> wait();

  static std::size_t state_bytes(Policy& policy);   // the snapshot's size on this rank

 private:
  Policy& policy_;
  MPI_Comm world_;                                 // the main thread's collectives
  MpiComm comm_;                                   // the writer's duplicate
  Kokkos::View<float*, PinnedHostSpace> snapshot_;
  std::vector<std::int64_t> slice_at_;             // where each manifest slice starts in it
  std::thread writer_;
  bool in_flight_ = false;                         // started, not yet waited for
  std::atomic<bool> done_{false};                  // the writer has finished
  std::string error_;                              // the writer's InputError; read after the join
  std::int64_t iteration_ = 0;
  double seconds_ = 0;
};

}  // namespace shardrl
