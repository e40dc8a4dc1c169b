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
// With LoRA the directory is the frozen base: every parameter but the adapters, which keep their
// values. Returns the base's checksum, the same on every rank and at any world size: zlib's CRC-32
// over the CRC-32s (4 bytes little-endian each, in the model's order) of the tensors read, each of
// its values as fp32 (IEEE F32LE, row-major), so a LoRA checkpoint knows the base it belongs to
// whatever the directory is called.
std::uint32_t load_hf_weights(const std::filesystem::path& dir, ShardedTrainer& trainer, const std::vector<UnitSpec>& units,
                     const ModelShape& shape, MPI_Comm comm);

}  // namespace shardrl
