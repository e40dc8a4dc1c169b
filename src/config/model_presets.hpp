// The shape of the transformer a job builds (model/model_shape.hpp): from a named preset, or from
// the [model] shape keys when preset = "custom". The one place that knows the presets.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "model/model_shape.hpp"

namespace shardrl {

// Names of the built-in presets ("custom" is not one of them).
const std::vector<std::string>& model_preset_names();

// The shape keys of [model] (a named preset forbids setting them).
const std::vector<std::string>& model_shape_keys();

// Resolves the preset (or the shape keys, for "custom").
ModelShape resolve_model_shape(const ModelConfig& model);
// The job's model: the [model] shape with the [lora] adapters (every layout derived from it, the
// trainer's, the checkpoint's and the memory plan's, has them or none).
ModelShape job_model_shape(const Config& config);

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
