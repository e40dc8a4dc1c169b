#include "model/param_spec.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "core/string_affix.hpp"

namespace shardrl {
namespace {

void add(UnitSpec& unit, std::string name, std::vector<std::int64_t> shape, Init init, bool no_decay,
         float init_std = 0) {
  ParamSpec p;
  p.init_std = init_std;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.init = init;
  p.no_decay = no_decay;
  p.offset = (unit.numel + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
  unit.numel = p.offset + p.numel();
  unit.params.push_back(std::move(p));
}

}  // namespace

std::int64_t ParamSpec::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const ParamSpec& UnitSpec::param(const std::string& suffix) const {
  for (const auto& p : params)
    if (ends_with(p.name, suffix)) return p;
  SHARDRL_FATAL(fmt::format("unit {} has no parameter named *{}", name, suffix));
}

bool UnitSpec::has(const std::string& suffix) const {
  for (const auto& p : params)
    if (ends_with(p.name, suffix)) return true;
  return false;
}

std::vector<UnitSpec> model_units(const ModelShape& s) {
  const std::int64_t D = s.d_model, V = s.vocab_size, F = s.d_ff, hd = s.head_dim;
  const std::int64_t q = s.n_heads * hd, kv = s.n_kv_heads * hd;
  std::vector<UnitSpec> units;

  UnitSpec embed{"embedding", {}, 0, -1};
  add(embed, "model.embed_tokens.weight", {V, D}, Init::normal, true);
  units.push_back(embed);

  for (int l = 0; l < s.n_layers; ++l) {
    UnitSpec layer{fmt::format("layer.{}", l), {}, 0, -1};
    const std::string p = fmt::format("model.layers.{}.", l);
    add(layer, p + "input_layernorm.weight", {D}, Init::ones, true);
    add(layer, p + "self_attn.q_proj.weight", {q, D}, Init::normal, false);
    add(layer, p + "self_attn.k_proj.weight", {kv, D}, Init::normal, false);
    add(layer, p + "self_attn.v_proj.weight", {kv, D}, Init::normal, false);
    add(layer, p + "self_attn.o_proj.weight", {D, q}, Init::normal, false);
    if (s.qk_norm) {
      add(layer, p + "self_attn.q_norm.weight", {hd}, Init::ones, true);
      add(layer, p + "self_attn.k_norm.weight", {hd}, Init::ones, true);
    }
    add(layer, p + "post_attention_layernorm.weight", {D}, Init::ones, true);
    if (s.moe_layer(l)) {
      // Hugging Face Qwen3-MoE names. The router and the shared expert join the attention in the
      // unit's dense part, padded to a multiple of E x kParamAlignElements; then the experts,
      // expert by expert (gate, up, down), each at the same stride: what a grouped GEMM over the
      // experts needs, and what lets expert parallelism give each of W ranks (W dividing E) its
      // E / W experts and 1 / W of the dense part as two whole pieces (fsdp/shard_layout.hpp).
      const std::int64_t E = s.n_experts, Fe = s.d_ff_expert;
      add(layer, p + "mlp.gate.weight", {E, D}, Init::normal, false);
      if (s.shared_expert) {
        add(layer, p + "mlp.shared_expert.gate_proj.weight", {Fe, D}, Init::normal, false);
        add(layer, p + "mlp.shared_expert.up_proj.weight", {Fe, D}, Init::normal, false);
        add(layer, p + "mlp.shared_expert.down_proj.weight", {D, Fe}, Init::normal, false);
      }
      const std::int64_t quantum = E * kParamAlignElements;
      layer.numel = (layer.numel + quantum - 1) / quantum * quantum;
      layer.experts_begin = layer.numel;
      for (std::int64_t e = 0; e < E; ++e) {
        add(layer, fmt::format("{}mlp.experts.{}.gate_proj.weight", p, e), {Fe, D}, Init::normal, false);
        add(layer, fmt::format("{}mlp.experts.{}.up_proj.weight", p, e), {Fe, D}, Init::normal, false);
        add(layer, fmt::format("{}mlp.experts.{}.down_proj.weight", p, e), {D, Fe}, Init::normal, false);
      }
      // Every expert's block the same whole number of alignment quanta.
      layer.numel = (layer.numel + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
    } else {
      add(layer, p + "mlp.gate_proj.weight", {F, D}, Init::normal, false);
      add(layer, p + "mlp.up_proj.weight", {F, D}, Init::normal, false);
      add(layer, p + "mlp.down_proj.weight", {D, F}, Init::normal, false);
    }
    // LoRA: the attention's targets in every layer; the MLP's in dense layers; in MoE layers
    // (whose router and shared expert stay frozen) the experts' with lora.experts. A layer with
    // none of them has no adapter region.
    const bool moe = s.moe_layer(l);
    bool adapted = moe && s.lora.experts;
    for (int t = 0; t < kLoraTargets; ++t)
      adapted |= s.lora.adapts(static_cast<LoraTarget>(t)) && !(moe && t >= static_cast<int>(LoraTarget::gate));
    if (s.lora.on() && adapted) {
      const std::int64_t in[kLoraTargets] = {D, D, D, q, D, D, F}, out[kLoraTargets] = {q, kv, kv, D, F, F, D};
      const std::int64_t r = s.lora.rank;
      layer.numel = (layer.numel + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
      layer.adapters_begin = layer.numel;
      for (int t = 0; t < kLoraTargets; ++t) {
        if (!s.lora.adapts(static_cast<LoraTarget>(t)) || (moe && t >= static_cast<int>(LoraTarget::gate))) continue;
        if (s.lora.kaiming)
          add(layer, p + kLoraModules[t] + ".lora_A.weight", {r, in[t]}, Init::uniform, false,
              1.0f / std::sqrt(float(in[t])));
        else
          add(layer, p + kLoraModules[t] + ".lora_A.weight", {r, in[t]}, Init::normal, false, 1.0f / float(r));
        add(layer, p + kLoraModules[t] + ".lora_B.weight", {out[t], r}, Init::zeros, false);
      }
      layer.numel = (layer.numel + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
      if (moe && s.lora.experts) {
        // Every expert's gate, up and down: expert by expert at one stride (aligned blocks), as
        // the experts themselves, so that a grouped GEMM finds expert e's at first + e x stride.
        const std::int64_t E = s.n_experts, Fe = s.d_ff_expert;
        const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
        const std::int64_t e_in[3] = {D, D, Fe}, e_out[3] = {Fe, Fe, D};
        for (std::int64_t e = 0; e < E; ++e) {
          for (int j = 0; j < 3; ++j) {
            const std::string m = fmt::format("{}mlp.experts.{}.{}", p, e, names[j]);
            if (s.lora.kaiming)
              add(layer, m + ".lora_A.weight", {r, e_in[j]}, Init::uniform, false, 1.0f / std::sqrt(float(e_in[j])));
            else
              add(layer, m + ".lora_A.weight", {r, e_in[j]}, Init::normal, false, 1.0f / float(r));
            add(layer, m + ".lora_B.weight", {e_out[j], r}, Init::zeros, false);
          }
          layer.numel = (layer.numel + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
        }
      }
    }
    units.push_back(layer);
  }

  UnitSpec head{"head", {}, 0, -1};
  add(head, "model.norm.weight", {D}, Init::ones, true);
  if (!s.tie_embeddings) add(head, "lm_head.weight", {V, D}, Init::normal, false);
  units.push_back(head);
  return units;
}

}  // namespace shardrl
