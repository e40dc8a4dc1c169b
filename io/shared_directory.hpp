// Whether every rank sees one directory at a path. A run's checkpoints are written by all ranks
// at once (parallel HDF5): a rank that sees another directory there (a relative run.dir with the
// ranks started in different working directories, a node-local path on several nodes) left every
// rank hanging in the first save's collective create, after all the training before it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <filesystem>

namespace shardrl {

// Rank 0 writes a probe file holding a token into `dir` (which it has created); each rank reads
// it back, waiting up to `wait` (10 s: a shared file system's caches) for it to show. InputError
// on every rank naming the lowest rank that does not see it, and both ranks' hosts. The probe is
// removed. Collective.
void require_shared_directory(const std::filesystem::path& dir, MPI_Comm comm,
                              std::chrono::milliseconds wait = std::chrono::seconds(10));

}  // namespace shardrl
