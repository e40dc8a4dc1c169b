// A job's policy from a Hugging Face model directory (`model.init_from`): its config.json must
// describe the job's model shape (the job's [model] keys decide, the directory must agree), and
// the weights come from model.safetensors or the files model.safetensors.index.json maps them
// to. Each rank reads only the parameters that overlap its own slices. Every problem is an
// InputError naming the file and the tensor or key.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "config/model_shape.hpp"
#include "fsdp/comm_expert_exchange.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "model/param_spec.hpp"

namespace shardrl {

void load_hf_weights(const std::filesystem::path& dir, ShardedTrainer& trainer, const std::vector<UnitSpec>& units,
                     const ModelShape& shape);

// A job's policy holding its model.init_from directory's weights, built as the train command
// builds its policy (the Config's model options, the expert exchange, the sharded trainer):
// what `convert --from-safetensors` saves and the transformers comparison runs.
struct ImportedPolicy {
  ImportedPolicy(const Config& config, Communicator& comm);
  ModelOptions options;
  std::unique_ptr<CommExpertExchange> expert_exchange;   // fsdp.expert_parallel only
  Transformer model;
  ShardedTrainer trainer;
};

}  // namespace shardrl
