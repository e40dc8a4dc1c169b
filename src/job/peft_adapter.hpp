// LoRA adapters as Hugging Face PEFT saves them (`PeftModel.save_pretrained` of a causal LM):
// adapter_model.safetensors with each adapter under `base_model.model.<module>.lora_A.weight` /
// `.lora_B.weight` (shardrl's parameter names are the Hugging Face module names), and
// adapter_config.json, which `peft.PeftModel.from_pretrained(base, dir)` reads.
#pragma once

#include <string>

#include "model/lora_shape.hpp"

namespace shardrl {

// PEFT's tensor name of a shardrl adapter parameter ("model.layers.0.self_attn.q_proj.lora_A.weight").
std::string peft_tensor_name(const std::string& name);

// adapter_config.json for adapters of `lora` over the base at `base_path` ("" : unnamed).
std::string peft_adapter_config_json(const LoraShape& lora, const std::string& base_path);

}  // namespace shardrl
