// The checkpoint directory of a run: <dir>/iter_<NNNNNNNN>.h5 files (8 digits at least), each
// written as <name>.partial and committed by a rename, and <dir>/latest holding the committed
// file name (one line), replaced atomically. Plain POSIX, no MPI: called on rank 0 only, while no
// checkpoint is being written. Failures of the file system -> InputError naming the path and the
// system's reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace shardrl {

// <dir>/iter_00000012.h5.partial: where a checkpoint is written before it is committed.
std::filesystem::path checkpoint_partial_path(const std::filesystem::path& dir, std::int64_t iteration);
// <dir>/iter_00000012.h5
std::filesystem::path checkpoint_path(const std::filesystem::path& dir, std::int64_t iteration);

// fsyncs the partial file, renames it to its final name, fsyncs the directory, then replaces
// `latest` (writes latest.tmp, fsync, rename, fsync of the directory). A crash at any moment
// leaves the previous checkpoint loadable and never a half-written file under a final name.
// A missing partial file -> InputError.
void commit_checkpoint(const std::filesystem::path& dir, std::int64_t iteration);

// <dir>/<the file `latest` names>, or an empty path when there is no `latest`. A `latest` that
// names a missing file, is empty, holds something other than a file name, or names an
// uncommitted `.partial` file -> InputError naming both.
std::filesystem::path latest_checkpoint(const std::filesystem::path& dir);

// The committed checkpoints in `dir` (iter_*.h5, not .partial), oldest first; none when `dir`
// does not exist. A crash between committing a file and replacing `latest` leaves the newest of
// these without `latest` naming it.
std::vector<std::filesystem::path> committed_checkpoints(const std::filesystem::path& dir);

// The committed checkpoints in `dir` whose iteration is past `iteration`, oldest first.
std::vector<std::filesystem::path> committed_checkpoints_after(const std::filesystem::path& dir,
                                                               std::int64_t iteration);

// Deletes the committed checkpoints past `iteration`, and `latest` where it names one of them
// (a missing `latest` then falls back to the newest committed file). Returns how many it deleted.
std::size_t delete_checkpoints_after(const std::filesystem::path& dir, std::int64_t iteration);

// Deletes the committed checkpoints other than the newest `keep_last` and those whose iteration
// is a multiple of `keep_every` (0: none kept for that reason), and any stale iter_*.h5.partial
// or latest.tmp left by a crash. Never deletes the one `latest` names. Other files are left alone.
void apply_retention(const std::filesystem::path& dir, std::int64_t keep_last, std::int64_t keep_every);

}  // namespace shardrl
