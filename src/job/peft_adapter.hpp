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
#include "model/model_shape.hpp"
#include "model/param_spec.hpp"

namespace shardrl {

// PEFT's tensor name of a shardrl adapter parameter ("model.layers.0.self_attn.q_proj.lora_A.weight").
std::string peft_tensor_name(const std::string& name);

// adapter_config.json for the adapters of `shape.lora` over the base at `base_path` ("" :
// unnamed). target_modules is the adapted modules' last names, as PEFT matches them; for a
// mixture-of-experts model, where those names stand for both the dense MLPs and the experts (and a
// shared expert), the pattern PEFT matches against each whole module name instead, naming the
// layers and modules that hold adapters (peft_target_pattern).
std::string peft_adapter_config_json(const ModelShape& shape, const std::string& base_path);

// That pattern (a Python regular expression, fully matched), or "" for a dense model.
std::string peft_target_pattern(const ModelShape& shape);

// Why adapter_config.json's text (from `where`) does not describe the adapters of `shape.lora`,
// or "": the same rank, alpha and target modules (a list of module names, "all-linear", or the
// pattern peft_target_pattern writes for this shape), plain LoRA (no DoRA, rsLoRA, biases,
// modules_to_save, per-layer ranks) over the base as it is (no PiSSA, OLoRA, CorDA or LoftQ
// initialisation, whose adapters belong over a base PEFT changed).
std::string peft_config_problem(const std::string& json, const std::string& where, const ModelShape& shape);

// Collective over `comm` (the trainer's ranks): the adapters of a PEFT directory into the trainer's
// main weights (each rank reads its own slices); the base is left as it is. A directory whose
// adapter_config.json does not match `lora`, a tensor missing, of another shape, not finite, or one
// the model has no place for: InputError on every rank, naming the file and the tensor or key.
void load_peft_adapters(const std::filesystem::path& dir, ShardedTrainer& trainer, const std::vector<UnitSpec>& units,
                        const ModelShape& shape, MPI_Comm comm);

}  // namespace shardrl
