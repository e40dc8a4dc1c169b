#include "config/model_presets.hpp"

#include <fmt/format.h>

#include <string>

namespace shardrl {
namespace {

ModelShape from_keys(const ModelConfig& m) {
  ModelShape s;
  s.vocab_size = static_cast<int>(m.vocab_size);
  s.d_model = static_cast<int>(m.d_model);
  s.n_layers = static_cast<int>(m.n_layers);
  s.n_heads = static_cast<int>(m.n_heads);
  s.n_kv_heads = static_cast<int>(m.n_kv_heads);
  s.head_dim = static_cast<int>(m.head_dim);
  s.d_ff = static_cast<int>(m.d_ff);
  s.rope_theta = static_cast<float>(m.rope_theta);
  s.rope_scaling_factor = static_cast<float>(m.rope_scaling_factor);
  s.rope_low_freq_factor = static_cast<float>(m.rope_low_freq_factor);
  s.rope_high_freq_factor = static_cast<float>(m.rope_high_freq_factor);
  s.rope_original_max_position = static_cast<int>(m.rope_original_max_position);
  s.norm_eps = static_cast<float>(m.norm_eps);
  s.qk_norm = m.qk_norm;
  s.tie_embeddings = m.tie_embeddings;
  s.max_seq_len = static_cast<int>(m.max_seq_len);
  s.n_experts = static_cast<int>(m.n_experts);
  s.top_k = s.n_experts > 0 ? static_cast<int>(m.top_k) : 0;
  s.d_ff_expert = s.n_experts > 0 ? static_cast<int>(m.d_ff_expert) : 0;
  s.moe_every = static_cast<int>(m.moe_every);
  s.shared_expert = s.n_experts > 0 && m.shared_expert;
  return s;
}

// Hugging Face shapes: Qwen/Qwen3-0.6B and meta-llama/Llama-3.2-1B (with its "llama3" RoPE
// frequency scaling).
ModelShape qwen3_0_6b() {
  ModelShape s;
  s.vocab_size = 151936;
  s.d_model = 1024;
  s.n_layers = 28;
  s.n_heads = 16;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.d_ff = 3072;
  s.rope_theta = 1000000.0f;
  s.norm_eps = 1e-6f;
  s.qk_norm = true;
  s.tie_embeddings = true;
  s.max_seq_len = 40960;
  return s;
}

ModelShape llama_1b() {
  ModelShape s;
  s.vocab_size = 128256;
  s.d_model = 2048;
  s.n_layers = 16;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.d_ff = 8192;
  s.rope_theta = 500000.0f;
  s.rope_scaling_factor = 32.0f;
  s.rope_low_freq_factor = 1.0f;
  s.rope_high_freq_factor = 4.0f;
  s.rope_original_max_position = 8192;
  s.norm_eps = 1e-5f;
  s.qk_norm = false;
  s.tie_embeddings = true;
  s.max_seq_len = 131072;
  return s;
}

// A real the shape holds as float, as the double of the float's shortest decimal: "1e-06", as a
// reader wrote it, not its float's exact 9.999999974752427e-07 (which reads back to the same
// float, as the decimal does; the check keeps it where a decimal would not).
double shape_real(float f) {
  const double d = std::stod(fmt::format("{}", f));
  return static_cast<float>(d) == f ? d : static_cast<double>(f);
}

}  // namespace

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = {"tiny", "qwen3-0.6b", "llama-1b"};
  return names;
}

const std::vector<std::string>& model_shape_keys() {
  static const std::vector<std::string> keys = {
      "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",  "d_ff",
      "rope_theta", "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
      "rope_original_max_position", "norm_eps", "qk_norm", "tie_embeddings", "max_seq_len", "n_experts", "top_k",
      "d_ff_expert", "moe_every", "shared_expert"};
  return keys;
}

ModelShape resolve_model_shape(const ModelConfig& model) {
  if (model.preset == "qwen3-0.6b") return qwen3_0_6b();
  if (model.preset == "llama-1b") return llama_1b();
  return from_keys(model);   // "tiny" (the keys' defaults) or "custom"
}

ModelShape job_model_shape(const Config& config) {
  ModelShape s = resolve_model_shape(config.model);
  if (config.lora.rank <= 0) return s;
  s.lora.rank = static_cast<int>(config.lora.rank);
  s.lora.alpha = static_cast<float>(config.lora.alpha);
  s.lora.kaiming = config.lora.init == LoraInit::kaiming;
  for (const std::string& t : config.lora.targets) s.lora.experts |= t == "experts";
  for (const std::string& t : config.lora.targets)
    for (int i = 0; i < kLoraTargets; ++i)
      if (t == kLoraTargetNames[i]) s.lora.targets |= 1u << i;
  return s;
}

ModelConfig with_resolved_shape(const ModelConfig& model) {
  const ModelShape s = resolve_model_shape(model);
  ModelConfig m = model;
  m.vocab_size = s.vocab_size;
  m.d_model = s.d_model;
  m.n_layers = s.n_layers;
  m.n_heads = s.n_heads;
  m.n_kv_heads = s.n_kv_heads;
  m.head_dim = s.head_dim;
  m.d_ff = s.d_ff;
  m.rope_theta = shape_real(s.rope_theta);
  m.rope_scaling_factor = shape_real(s.rope_scaling_factor);
  m.rope_low_freq_factor = shape_real(s.rope_low_freq_factor);
  m.rope_high_freq_factor = shape_real(s.rope_high_freq_factor);
  m.rope_original_max_position = s.rope_original_max_position;
  m.norm_eps = shape_real(s.norm_eps);
  m.qk_norm = s.qk_norm;
  m.tie_embeddings = s.tie_embeddings;
  m.max_seq_len = s.max_seq_len;
  m.n_experts = s.n_experts;
  if (s.n_experts > 0) {
    m.top_k = s.top_k;
    m.d_ff_expert = s.d_ff_expert;
  }
  m.moe_every = s.moe_every;
  m.shared_expert = s.shared_expert;
  return m;
}

std::vector<std::string> shape_overrides(const ModelShape& s) {
  std::vector<std::string> o = {
      fmt::format("model.vocab_size={}", s.vocab_size),     fmt::format("model.d_model={}", s.d_model),
      fmt::format("model.n_layers={}", s.n_layers),         fmt::format("model.n_heads={}", s.n_heads),
      fmt::format("model.n_kv_heads={}", s.n_kv_heads),     fmt::format("model.head_dim={}", s.head_dim),
      fmt::format("model.d_ff={}", s.d_ff),                 fmt::format("model.rope_theta={}", s.rope_theta),
      fmt::format("model.norm_eps={}", s.norm_eps),         fmt::format("model.qk_norm={}", s.qk_norm),
      fmt::format("model.tie_embeddings={}", s.tie_embeddings), fmt::format("model.max_seq_len={}", s.max_seq_len)};
  if (s.rope_scaling_factor > 0)
    for (std::string kv : {fmt::format("model.rope_scaling_factor={}", s.rope_scaling_factor),
                           fmt::format("model.rope_low_freq_factor={}", s.rope_low_freq_factor),
                           fmt::format("model.rope_high_freq_factor={}", s.rope_high_freq_factor),
                           fmt::format("model.rope_original_max_position={}", s.rope_original_max_position)})
      o.push_back(std::move(kv));
  if (s.n_experts > 0)
    for (std::string kv : {fmt::format("model.n_experts={}", s.n_experts), fmt::format("model.top_k={}", s.top_k),
                           fmt::format("model.d_ff_expert={}", s.d_ff_expert),
                           fmt::format("model.moe_every={}", s.moe_every),
                           fmt::format("model.shared_expert={}", s.shared_expert)})
      o.push_back(std::move(kv));
  return o;
}

std::vector<std::pair<std::string, std::string>> shape_problems(const ModelShape& s) {
  std::vector<std::pair<std::string, std::string>> out;
  if (s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads != 0)
    out.emplace_back("model.n_kv_heads", fmt::format("model.n_heads = {} is not a multiple of model.n_kv_heads = {}", s.n_heads,
                              s.n_kv_heads));
  if (s.n_experts > 0 && s.top_k > s.n_experts)
    out.emplace_back("model.top_k",
                     fmt::format("model.top_k = {} exceeds model.n_experts = {}", s.top_k, s.n_experts));
  if (s.rope_scaling_factor > 0 && !(s.rope_high_freq_factor > s.rope_low_freq_factor))
    out.emplace_back("model.rope_high_freq_factor",
                     fmt::format("model.rope_high_freq_factor = {} must exceed model.rope_low_freq_factor = {} (Llama 3 "
                                 "RoPE scaling interpolates between them)",
                                 s.rope_high_freq_factor, s.rope_low_freq_factor));
  if (s.head_dim % 2 != 0)
    out.emplace_back("model.head_dim", fmt::format("model.head_dim = {} must be even (RoPE rotates pairs)", s.head_dim));
  return out;
}

}  // namespace shardrl
