// Which checkpoint a train job resumes from, and whether it may: the run's `latest` (or newest
// committed file), --resume-from, --no-resume and --overwrite, and the configuration changes
// since the checkpoint. A run is never overwritten by accident, nor continued on another course.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>

#include "app/cli.hpp"
#include "config/config.hpp"

namespace shardrl {

// --resume-from leaves no other course's files in the run: a checkpoint earlier than the run's
// newest (the job would write its own iter_N files over the committed ones of the course it
// leaves, and drop their metrics), or a checkpoint that is not one of the run's own into a run
// that has a history before it (checkpoints, or metrics records before the iteration resumed at:
// the run's files would join two courses, and `report` and TensorBoard draw them as one). Refused
// unless --overwrite, which deletes those checkpoints (and in the second case all of the run's
// checkpoints and its metrics) first. Rank 0 only (run_on_root).
void leave_no_other_course(const std::filesystem::path& checkpoints, const std::filesystem::path& from,
                                std::int64_t resumed_at, bool overwrite, const std::filesystem::path& run_dir);

// The start options a job acts on. A requeued run (--requeued: slurm/run_shardrl.sh passes it on
// every run of a job after the first) continues from the run's own checkpoints where it has any:
// the first run's --resume-from would send it back to where the first run began (or be refused
// beside the later checkpoints it saved), --no-resume --overwrite would delete them. Where it has
// none yet (the first run stopped, or its node failed, before its first save), they apply as at
// the first run: dropping --resume-from there would start the run over from its initial weights.
// Collective (rank 0 looks and tells every rank).
TrainArgs start_options(MPI_Comm world, int rank, const TrainArgs& args, const std::filesystem::path& run_dir);
// Notes in the run directory that this job (SLURM_JOB_ID) has taken its start options, once they
// took effect, and the iteration it started at (start_options reads both). Nothing where
// `start` has none. Collective.
void note_start_options(MPI_Comm world, const TrainArgs& start, const std::filesystem::path& run_dir,
                        std::int64_t iterations_done);

// The checkpoint to resume from: --resume-from, else the run's latest, else (a crash between a
// commit and `latest`) its newest committed checkpoint, else none (empty). Rank 0 looks and tells
// every rank, problems included. --no-resume on a run that has checkpoints is refused unless
// --overwrite, which deletes them and the run's metrics first. Collective.
std::filesystem::path resume_path(MPI_Comm world, int rank, const TrainArgs& args,
                                  const std::filesystem::path& run_dir);

// A resumed run continues exactly only if nothing that shapes it changed: every key that differs
// from the checkpoint's configuration is listed; those that change the trajectory stop the job
// unless `allowed` (--allow-config-change). A dataset task's files are compared by their
// fingerprint (`task_checksum`, rl/task_checksum.hpp; -1 for none) where the checkpoint records
// one: another one changes the trajectory whatever the paths, and where they are the same,
// rl.dataset and model.tokenizer (the files' places) may change. Collective.
void check_config_changes(MPI_Comm world, const std::filesystem::path& checkpoint, const Config& cfg, bool allowed,
                          std::int64_t task_checksum);

}  // namespace shardrl
