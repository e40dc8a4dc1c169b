// Low-rank adapters (LoRA, as Hugging Face PEFT lays them out): a targeted linear layer
// y = x W^T becomes y = x W^T + (alpha / rank) (x A^T) B^T, with A (rank, in) and B (out, rank)
// trained and everything else frozen. Part of the model's shape, so that every layout derived
// from it (the units' parameters, checkpoints, the memory plan) has the adapters or none.
#pragma once

#include <cstdint>

namespace shardrl {

// The linear layers an adapter can target (PEFT's target_modules, short names).
enum class LoraTarget : int { q, k, v, o, gate, up, down };
inline constexpr int kLoraTargets = 7;
inline constexpr const char* kLoraTargetNames[kLoraTargets] = {"q", "k", "v", "o", "gate", "up", "down"};
// The module each target adapts, under model.layers.<l>.
inline constexpr const char* kLoraModules[kLoraTargets] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

struct LoraShape {
  int rank = 0;              // 0: no adapters (full fine-tuning)
  float alpha = 0;           // the adapters' output is scaled by alpha / rank
  std::uint32_t targets = 0; // bit t: LoraTarget t carries an adapter
  bool kaiming = false;      // A uniform in +-1 / sqrt(in) (PEFT's default), else Gaussian 1 / rank
  bool experts = false;      // MoE layers: every expert's gate, up and down projections carry one

  bool on() const { return rank > 0; }
  bool adapts(LoraTarget t) const { return on() && (targets >> static_cast<int>(t) & 1u) != 0; }
  float scale() const { return alpha / static_cast<float>(rank); }
};

}  // namespace shardrl
