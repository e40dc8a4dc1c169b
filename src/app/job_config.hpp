// Reading the job's Config once: rank 0 reads the file, every rank parses the same text, so
// every rank reaches the same verdict and no rank branches alone (DESIGN.md invariants 1, 6).
#pragma once

#include <mpi.h>

#include "app/cli.hpp"
#include "config/load.hpp"

namespace shardrl {

// Collective. Returns the loaded config with every problem found (file, overrides, job shape).
// `build`: the build whose rules the config is checked against (default: this one; `plan
// --gpu-memory` checks a GPU build's config on a CPU login node).
// `trains`: as check_for_job's (false for generate). `world_size` 0: no job runs (tokenize), so
// none of check_for_job's checks of a job's shape.
LoadedConfig read_job_config(MPI_Comm world, const TrainArgs& args, int world_size,
                             const BuildInfo& build = this_build(), bool trains = true);
// The same from TOML text every rank already has (e.g. a checkpoint's resolved config).
LoadedConfig parse_job_config(const std::string& text, const std::string& source,
                              const std::vector<std::string>& overrides, int world_size,
                              const BuildInfo& build = this_build(), bool trains = true);

// Rank 0 prints "shardrl: invalid configuration (N problems):" and one line per problem.
// The configuration a checkpoint saved, read back to be compared or to learn its model: the
// schema's checks only, as any build would have accepted them (no world-size checks: it was
// saved by another job, on any number of ranks, perhaps a GPU build).
LoadedConfig parse_saved_config(const std::string& text, const std::string& source);

void report_config_errors(const LoadedConfig& loaded, int rank);

}  // namespace shardrl
