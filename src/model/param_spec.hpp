// The parameters of the model, declared per FSDP unit: the embedding, each decoder layer, and
// the final norm with the LM head. Each parameter has its Hugging Face name, its shape and its
// initialisation; inside a unit's flat buffer every parameter starts at an aligned offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_shape.hpp"

namespace shardrl {

enum class Init { normal, uniform, ones, zeros };

struct ParamSpec {
  std::string name;                  // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;   // row-major, e.g. (n_heads*head_dim, d_model)
  Init init = Init::normal;
  bool no_decay = false;             // norms and embeddings: no weight decay by default
  float init_std = 0;                // Init::normal's standard deviation (0: the model's, model.init_std),
                                     // or Init::uniform's bound
  std::int64_t offset = 0;           // elements from the start of the unit's flat buffer

  std::int64_t numel() const;
};

// Offsets are multiples of this many elements: 256 bytes in bf16, 512 in fp32, so GEMMs on
// views of a flat buffer keep their aligned fast paths.
inline constexpr std::int64_t kParamAlignElements = 128;

struct UnitSpec {
  std::string name;                  // "embedding", "layer.3", "head"
  std::vector<ParamSpec> params;
  std::int64_t numel = 0;            // flat size including alignment padding
  // Mixture-of-experts layers: where the experts' region starts (a multiple of n_experts x
  // kParamAlignElements); the region runs to numel, n_experts equal blocks. -1: no experts.
  std::int64_t experts_begin = -1;
  // With LoRA (ModelShape::lora), the layer's adapters: from here (aligned) to numel, each
  // target's A then B in LoraTarget order; everything before is the frozen base. -1: none.
  std::int64_t adapters_begin = -1;

  const ParamSpec& param(const std::string& suffix) const;   // by the end of its name
  bool has(const std::string& suffix) const;
  // Whether the optimizer trains `p` of this unit: every parameter, or with LoRA the adapters only.
  bool trains(const ParamSpec& p, bool lora) const {
    return !lora || (adapters_begin >= 0 && p.offset >= adapters_begin);
  }
};

// Unit 0 is the embedding, units 1..n_layers the decoder layers, the last the final norm and
// (unless tied to the embedding) the LM head. With LoRA every decoder layer ends with its
// adapters, named as PEFT names them under the layer (`model.layers.3.self_attn.q_proj.lora_A.weight`):
// A Gaussian with standard deviation 1 / rank (PEFT's init_lora_weights = "gaussian"), B zero,
// so the adapted model starts as the base.
std::vector<UnitSpec> model_units(const ModelShape& shape);

}  // namespace shardrl
