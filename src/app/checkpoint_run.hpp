// The job of a command that uses a policy without training it (generate, evaluate): its config
// from --config or else the checkpoint's own, the model checked against the checkpoint's run, a
// LoRA run's base where it is now (--base).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/load.hpp"
#include "io/sharded_file.hpp"

namespace shardrl {

struct CheckpointRunArgs {
  std::string command;                  // "generate", "evaluate": named in messages
  std::string config_path;              // --config ("": the checkpoint's own)
  std::string checkpoint;               // --checkpoint ("": none)
  std::vector<std::string> overrides;   // --set and the command's own flags, as section.key=value
  std::string base;                     // --base ("": the run's model.init_from)
  bool trains = false;                  // the config checked as a training job's (check_for_job)
};

struct CheckpointRun {
  std::unique_ptr<ShardedFileReader> checkpoint;   // open, or nullptr without --checkpoint
  LoadedConfig loaded;                             // its problems for report_config_errors
  // The seed a LoRA run's random base (no model.init_from) is drawn again from: the checkpoint's
  // run's, whatever --seed says (that seeds the draws only).
  std::int64_t base_seed = 0;
};

// Collective. Throws InputError, the same on every rank, for a checkpoint that cannot be read, a
// base that is not a directory, or a config whose model is not the checkpoint's (a shape, the
// adapters' rank, alpha or targets: it read the tensors into that model silently). Returns with
// loaded.ok() false for the config's own problems.
CheckpointRun open_checkpoint_run(MPI_Comm world, int world_size, const CheckpointRunArgs& args);

}  // namespace shardrl
