// The Hugging Face `config.json` of a shardrl model shape: LlamaForCausalLM (no q/k norm),
// Qwen3ForCausalLM (q/k norm) or Qwen3MoeForCausalLM (mixture-of-experts layers). A shape none
// of them describes (a shared expert) is refused with InputError naming why.
#pragma once

#include <string>

#include "config/model_shape.hpp"

namespace shardrl {

// `torch_dtype`: "float32" or "bfloat16", the dtype the tensors are exported in.
std::string hf_config_json(const ModelShape& shape, const std::string& torch_dtype);

}  // namespace shardrl
