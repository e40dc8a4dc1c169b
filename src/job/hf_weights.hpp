// A job's policy from a Hugging Face model directory (`model.init_from`): its config.json must
// describe the job's model shape (the job's [model] keys decide, the directory must agree), and
// the weights come from model.safetensors or the files model.safetensors.index.json maps them
// to. Each rank reads only the parameters that overlap its own slices. Every problem is an
// InputError naming the file and the tensor or key.
#pragma once

#include <mpi.h>

#include <filesystem>
#include <vector>

#include "config/model_presets.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "model/param_spec.hpp"

namespace shardrl {

// Collective over `comm` (the ranks of the trainer): a weight that is not finite (NaN, Inf) stops
// every rank with an InputError naming the file and the tensor, whichever rank's slice holds it.
void load_hf_weights(const std::filesystem::path& dir, ShardedTrainer& trainer, const std::vector<UnitSpec>& units,
                     const ModelShape& shape, MPI_Comm comm);

}  // namespace shardrl
