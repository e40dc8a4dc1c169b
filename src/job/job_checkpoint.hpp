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
#include <functional>
#include <string>
#include <utility>
#include <variant>
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
// configuration as written to the run directory. (checkpoint_manifest + write_checkpoint, with
// the state read from the device one unit at a time.)
void save_job_checkpoint(const std::filesystem::path& dir, const JobPosition& position, Policy& policy,
                         const std::string& config_toml, MPI_Comm comm);

// Everything a save writes but the tensors' values, taken from the policy when the save starts:
// the small values, and where each trained tensor lies in this rank's state slices (one slice per
// state and unit, as ShardedTrainer::read_slice returns them). write_checkpoint reads nothing
// else, so it may run on another thread while training goes on (AsyncCheckpointSave).
struct CheckpointManifest {
  struct Tensor {
    std::string name;                      // "/model/model.norm.weight"
    std::vector<std::uint64_t> shape;      // global
    std::uint64_t first = 0, count = 0;    // this rank's elements of the flattened tensor
    std::int64_t at = 0;                   // where they start in the slice
  };
  struct Slice {
    int unit = 0;
    SliceState state = SliceState::main;
    std::int64_t elements = 0;             // ShardedTrainer::state_elements
    std::vector<Tensor> tensors;
  };
  std::int64_t iteration = 0;              // the file is iter_<iteration>.h5
  std::vector<std::pair<std::string, std::variant<std::string, std::int64_t>>> values;
  std::vector<Slice> slices;               // in the order they are written
  std::int64_t keep_last = 0, keep_every = 0;
  bool fail_commit = false;                // debug.fail_io = "commit" at this iteration
  bool fail_write = false;                 // debug.fail_io = "write" at this iteration
  std::int64_t pause_between_tensors_ms = 0;   // debug.save_pause_ms

  std::int64_t state_elements() const;     // of all slices together
};
CheckpointManifest checkpoint_manifest(const JobPosition& position, Policy& policy, const std::string& config_toml,
                                       MPI_Comm comm);

// Collective over `comm`. Writes the manifest's checkpoint in <dir> with slice i's values from
// values(i) (its `elements` floats, read before values(i + 1) is asked for), then commits it and
// applies retention; errors as save_job_checkpoint's. `show_progress`: the progress bar (the main
// thread's saves only).
void write_checkpoint(const std::filesystem::path& dir, const CheckpointManifest& manifest,
                      const std::function<const float*(std::size_t slice)>& values, MPI_Comm comm,
                      bool show_progress);

// Collective. Loads `file` into the trainer (any world size) and returns the position. A file
// that is not a readable checkpoint, has another format version, lacks a tensor the job needs,
// has a tensor of another shape or fails its checksum (with checkpoint.verify): InputError on
// every rank, naming the file and the tensor.
JobPosition load_job_checkpoint(const std::filesystem::path& file, Policy& policy, MPI_Comm comm);

// The tensors a checkpoint of `config`'s job holds that `in` lacks (their full names), empty when
// it is complete: the one completeness check of resume and `inspect --verify`.
std::vector<std::string> missing_tensors(const ShardedFileReader& in, const Config& config);

// The model as a checkpoint records it (/meta/model): the preset and the resolved shape.
std::string model_summary(const Config& config);

// Collective. The policy's main weights alone from `file` (the optimizer state and counters stay
// as they are): what `generate` samples from; with LoRA the adapters, over the base the trainer
// was initialised with (refused unless it is the one they were trained over). Errors as
// load_job_checkpoint's.
void load_policy_weights(const std::filesystem::path& file, Policy& policy, MPI_Comm comm);

}  // namespace shardrl
