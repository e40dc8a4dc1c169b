#include "model/model_shape.hpp"

#include <fmt/format.h>

#include <iterator>
#include <utility>

namespace shardrl {

std::int64_t ModelShape::parameter_count() const {
  std::int64_t D = d_model, V = vocab_size, q = std::int64_t(n_heads) * head_dim,
               kv = std::int64_t(n_kv_heads) * head_dim, F = d_ff;
  const std::int64_t attention = 2 * D + D * q + 2 * D * kv + q * D + (qk_norm ? 2 * head_dim : 0);
  // moe_layer(l) holds for every moe_every-th layer: counted, not looped over (n_layers may be huge).
  const std::int64_t moe = n_experts > 0 ? n_layers / moe_every : 0;
  const std::int64_t moe_mlp = std::int64_t(n_experts) * D + (n_experts + (shared_expert ? 1 : 0)) *
                                                                 std::int64_t(3) * D * d_ff_expert;
  const std::int64_t layers = std::int64_t(n_layers) * attention + moe * moe_mlp + (n_layers - moe) * 3 * D * F;
  return V * D + layers + D + (tie_embeddings ? 0 : V * D);
}

std::int64_t ModelShape::adapter_count() const {
  if (!lora.on()) return 0;
  const std::int64_t D = d_model, q = std::int64_t(n_heads) * head_dim, kv = std::int64_t(n_kv_heads) * head_dim;
  const std::int64_t in[kLoraTargets] = {D, D, D, q, D, D, d_ff}, out[kLoraTargets] = {q, kv, kv, D, d_ff, d_ff, D};
  std::int64_t total = 0;
  for (int l = 0; l < n_layers; ++l) {
    // An MoE layer's MLP targets are its experts' (lora.experts), not gate/up/down.
    for (int t = 0; t < kLoraTargets; ++t)
      if (lora.adapts(static_cast<LoraTarget>(t)) && !(moe_layer(l) && t >= static_cast<int>(LoraTarget::gate)))
        total += std::int64_t(lora.rank) * (in[t] + out[t]);
    if (moe_layer(l) && lora.experts) total += std::int64_t(n_experts) * lora.rank * 3 * (d_model + d_ff_expert);
  }
  return total;
}

namespace {

std::string first_difference(const std::pair<const char*, std::pair<double, double>>* begin,
                             const std::pair<const char*, std::pair<double, double>>* end, const std::string& a_where,
                             const std::string& b_where) {
  for (auto f = begin; f != end; ++f)
    if (f->second.first != f->second.second)
      return fmt::format("{} is {} {} and {} {}", f->first, f->second.first, a_where, f->second.second, b_where);
  return "";
}

std::string target_list(const LoraShape& l) {
  std::string names;
  for (int t = 0; t < kLoraTargets; ++t)
    if ((l.targets >> t & 1u) != 0) names += std::string(names.empty() ? "" : ", ") + "\"" + kLoraTargetNames[t] + "\"";
  if (l.experts) names += std::string(names.empty() ? "" : ", ") + "\"experts\"";
  return "[" + names + "]";
}

}  // namespace

std::string shape_difference(const ModelShape& a, const ModelShape& b, const std::string& a_where,
                             const std::string& b_where) {
  const std::pair<const char*, std::pair<double, double>> fields[] = {
      {"vocab_size", {a.vocab_size, b.vocab_size}},     {"d_model (hidden_size)", {a.d_model, b.d_model}},
      {"n_layers", {a.n_layers, b.n_layers}},           {"n_heads", {a.n_heads, b.n_heads}},
      {"n_kv_heads", {a.n_kv_heads, b.n_kv_heads}},     {"head_dim", {a.head_dim, b.head_dim}},
      {"d_ff (intermediate_size)", {a.d_ff, b.d_ff}},   {"rope_theta", {a.rope_theta, b.rope_theta}},
      {"rope_scaling.factor", {a.rope_scaling_factor, b.rope_scaling_factor}},
      {"rope_scaling.low_freq_factor", {a.rope_low_freq_factor, b.rope_low_freq_factor}},
      {"rope_scaling.high_freq_factor", {a.rope_high_freq_factor, b.rope_high_freq_factor}},
      {"rope_scaling.original_max_position_embeddings", {a.rope_original_max_position, b.rope_original_max_position}},
      {"norm_eps", {a.norm_eps, b.norm_eps}},           {"qk_norm (qwen3)", {a.qk_norm, b.qk_norm}},
      {"tie_embeddings", {a.tie_embeddings, b.tie_embeddings}},
      {"n_experts", {a.n_experts, b.n_experts}},        {"top_k", {a.top_k, b.top_k}},
      {"d_ff_expert", {a.d_ff_expert, b.d_ff_expert}},  {"moe_every", {a.moe_every, b.moe_every}},
      {"shared_expert", {a.shared_expert, b.shared_expert}}};
  return first_difference(std::begin(fields), std::end(fields), a_where, b_where);
}

std::string lora_difference(const LoraShape& a, const LoraShape& b, const std::string& a_where,
                            const std::string& b_where) {
  const std::pair<const char*, std::pair<double, double>> fields[] = {{"lora.rank", {a.rank, b.rank}}};
  if (std::string d = first_difference(std::begin(fields), std::end(fields), a_where, b_where); !d.empty()) return d;
  if (!a.on()) return "";
  if (a.alpha != b.alpha) return fmt::format("lora.alpha is {} {} and {} {}", a.alpha, a_where, b.alpha, b_where);
  if (a.targets != b.targets || a.experts != b.experts)
    return fmt::format("lora.targets is {} {} and {} {}", target_list(a), a_where, target_list(b), b_where);
  return "";
}

}  // namespace shardrl
