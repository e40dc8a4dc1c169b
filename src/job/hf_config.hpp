// The Hugging Face `config.json` of a shardrl model shape: LlamaForCausalLM (no q/k norm),
// Qwen3ForCausalLM (q/k norm) or Qwen3MoeForCausalLM (mixture-of-experts layers). A shape none
// of them describes (a shared expert) is refused with InputError naming why.
#pragma once

#include <filesystem>
#include <string>

#include "config/model_presets.hpp"

namespace shardrl {

// `torch_dtype`: "float32" or "bfloat16", the dtype the tensors are exported in. `token_ids`: a
// JSON object of special-token ids (bos_token_id, eos_token_id, pad_token_id) written with them.
std::string hf_config_json(const ModelShape& shape, const std::string& torch_dtype,
                           const std::string& token_ids = "{}");

// The shape a Hugging Face `config.json` describes (its text; `where` names it in errors).
// Refuses model types other than llama, qwen3 and qwen3_moe, and features shardrl does not
// implement (RoPE scaling, biases, dense layers between MoE layers other than by
// decoder_sparse_step), naming the key.
ModelShape shape_from_hf_config(const std::string& json_text, const std::string& where);

// The [model] table of a job whose policy is the Hugging Face directory's model: a custom shape
// with its config.json's keys and `init_from` set to the directory, plus `[train] seq_len = 1`
// (callers override what they need). Reads dir/config.json.
std::string hf_job_config_toml(const std::filesystem::path& dir);

}  // namespace shardrl
