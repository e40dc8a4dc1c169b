// LoRA adapters as Hugging Face PEFT saves them (`PeftModel.save_pretrained` of a causal LM):
// adapter_model.safetensors with each adapter under `base_model.model.<module>.lora_A.weight` /
// `.lora_B.weight` (shardrl's parameter names are the Hugging Face module names), and
// adapter_config.json, which `peft.PeftModel.from_pretrained(base, dir)` reads. Written by
// `convert --to-peft`, read by `lora.init_from`.
#pragma once

#include <mpi.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fsdp/sharded_trainer.hpp"
#include "model/lora_shape.hpp"
#include "model/param_spec.hpp"

namespace shardrl {

// PEFT's tensor name of a shardrl adapter parameter ("model.layers.0.self_attn.q_proj.lora_A.weight").
std::string peft_tensor_name(const std::string& name);

// adapter_config.json for adapters of `lora` over the base at `base_path` ("" : unnamed).
std::string peft_adapter_config_json(const LoraShape& lora, const std::string& base_path);

// Why adapter_config.json's text (from `where`) does not describe adapters of `lora`, or "": the
// same rank, alpha and target modules (a list of module names, or "all-linear"), plain LoRA (no
// DoRA, rsLoRA, biases, modules_to_save, per-layer ranks).
std::string peft_config_problem(const std::string& json, const std::string& where, const LoraShape& lora);

// Collective over `comm` (the trainer's ranks): the adapters of a PEFT directory into the trainer's
// main weights (each rank reads its own slices); the base is left as it is. A directory whose
// adapter_config.json does not match `lora`, a tensor missing, of another shape, not finite, or one
// the model has no place for: InputError on every rank, naming the file and the tensor or key.
void load_peft_adapters(const std::filesystem::path& dir, ShardedTrainer& trainer, const std::vector<UnitSpec>& units,
                        const LoraShape& lora, MPI_Comm comm);

}  // namespace shardrl
