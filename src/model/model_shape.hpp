// The shape of a decoder-only transformer (Llama / Qwen3 / Qwen3-MoE style): what every layer
// that sizes a buffer or a parameter reads. Where a shape comes from (a preset, the [model] keys,
// a Hugging Face config.json) is the job's business (config/model_presets.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "model/lora_shape.hpp"

namespace shardrl {

struct ModelShape {
  int vocab_size = 0;
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_ff = 0;
  float rope_theta = 0;
  // Llama 3 RoPE frequency scaling (Hugging Face rope_type "llama3"): factor 0 is plain RoPE.
  float rope_scaling_factor = 0;
  float rope_low_freq_factor = 1;
  float rope_high_freq_factor = 4;
  int rope_original_max_position = 8192;
  float norm_eps = 0;
  bool qk_norm = false;
  bool tie_embeddings = false;
  int max_seq_len = 0;
  // Mixture of experts: n_experts = 0 for a dense model.
  int n_experts = 0;
  int top_k = 0;
  int d_ff_expert = 0;
  int moe_every = 1;
  bool shared_expert = false;
  // Low-rank adapters on a frozen base (dense layers only); rank 0: none.
  LoraShape lora;

  // Decoder layer l's MLP is a mixture of experts.
  bool moe_layer(int l) const { return n_experts > 0 && (l + 1) % moe_every == 0; }
  std::int64_t parameter_count() const;   // the base model's, adapters aside
  std::int64_t adapter_count() const;     // the adapters' (0 without LoRA)
};

// The first difference between two shapes' weights or what they compute (every field but
// max_seq_len, which bounds positions only; adapters aside), "" if none, as
// "<field> is <a's> <a_where> and <b's> <b_where>".
std::string shape_difference(const ModelShape& a, const ModelShape& b, const std::string& a_where,
                             const std::string& b_where);
// Likewise for the adapters: lora.rank, alpha, targets and whether the experts carry them.
std::string lora_difference(const LoraShape& a, const LoraShape& b, const std::string& a_where,
                            const std::string& b_where);

}  // namespace shardrl
