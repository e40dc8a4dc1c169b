// The whole job's state in one HDF5 checkpoint (docs/checkpoint-format.md): every parameter's
// fp32 main weights and Adam moments under its Hugging Face name with its global shape, the
// frozen reference when the job keeps one, the optimizer's counters, the seed (all randomness is
// counter-based: keyed by seed, iteration, prompt, sample and token, so there is no generator
// state to save), the data cursor, and the metadata that lets a reader check what it loads.
// Each rank writes and reads only its own slices, so a file saved by N ranks loads on M.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "io/sharded_file.hpp"
#include "job/policy.hpp"

namespace shardrl {

// Where the job stands: what a resumed job skips.
struct JobPosition {
  std::int64_t iterations_done = 0;     // RL iterations finished
  std::int64_t warmup_steps_done = 0;   // supervised warm-up steps finished
};

// Collective. Writes <dir>/iter_<iterations_done>.h5 under a temporary name, closes it on every
// rank, commits it (rename, then `latest`), applies retention. `config_toml` is the resolved
// configuration as written to the run directory.
void save_job_checkpoint(const std::filesystem::path& dir, const JobPosition& position, Policy& policy,
                         const std::string& config_toml, MPI_Comm comm);

// Collective. Loads `file` into the trainer (any world size) and returns the position. A file
// that is not a readable checkpoint, has another format version, lacks a tensor the job needs,
// has a tensor of another shape or fails its checksum (with checkpoint.verify): InputError on
// every rank, naming the file and the tensor.
JobPosition load_job_checkpoint(const std::filesystem::path& file, Policy& policy, MPI_Comm comm);

// The tensors a checkpoint of `config`'s job holds that `in` lacks (their full names), empty when
// it is complete: the one completeness check of resume and `inspect --verify`.
std::vector<std::string> missing_tensors(const ShardedFileReader& in, const Config& config);

// Collective. The policy's main weights alone from `file` (the optimizer state and counters stay
// as they are): what `generate` samples from; with LoRA the adapters, over the base the trainer
// was initialised with (refused unless it is the one they were trained over). Errors as
// load_job_checkpoint's.
void load_policy_weights(const std::filesystem::path& file, Policy& policy, MPI_Comm comm);

}  // namespace shardrl
