// The shape of the transformer a job builds: from a named preset, or from the [model] shape
// keys when preset = "custom". The one place that knows the presets.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"

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

  // Decoder layer l's MLP is a mixture of experts.
  bool moe_layer(int l) const { return n_experts > 0 && (l + 1) % moe_every == 0; }
  std::int64_t parameter_count() const;
};

// Names of the built-in presets ("custom" is not one of them).
const std::vector<std::string>& model_preset_names();

// The shape keys of [model] (a named preset forbids setting them).
const std::vector<std::string>& model_shape_keys();

// Resolves the preset (or the shape keys, for "custom").
ModelShape resolve_model_shape(const ModelConfig& model);

// A copy of `model` whose shape keys hold the resolved shape: what a table of the job's
// settings shows. (The job's Config itself keeps what the user wrote.)
ModelConfig with_resolved_shape(const ModelConfig& model);

// The shape as `--set` overrides of the shape keys ("model.d_model=1024", ...); the MoE keys only
// for a model with experts (on a dense model they are refused).
std::vector<std::string> shape_overrides(const ModelShape& shape);

// Problems of a shape that no preset has but a custom shape may, each with the key it is
// about ("model.head_dim", ...); empty when valid.
std::vector<std::pair<std::string, std::string>> shape_problems(const ModelShape& shape);

}  // namespace shardrl
