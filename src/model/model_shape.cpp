#include "model/model_shape.hpp"

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

}  // namespace shardrl
