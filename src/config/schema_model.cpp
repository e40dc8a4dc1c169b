// The key table's [model] and [lora] sections (config/schema.cpp holds the rest): the model's
// shape, precision, attention and init, and the adapters.
#include <fmt/format.h>

#include "config/model_presets.hpp"
#include "config/schema_keys.hpp"

namespace shardrl::schema_keys {

void add_model_keys(std::vector<KeyDef>& s) {
  using VK = ValueKind;
  KeyDef preset = field("model", "preset", VK::choice,
                        "Model shape: `tiny` for tests, `qwen3-0.6b` and `llama-1b` for GPU "
                        "benchmarks.",
                        &Config::model, &ModelConfig::preset);
  preset.choices = model_preset_names();
  preset.choices.push_back("custom");
  preset.meaning = "Model shape: `tiny` for tests, `qwen3-0.6b` and `llama-1b` (Hugging Face shapes) for "
                   "GPU benchmarks, or `custom`: the shape keys below.";
  s.push_back(preset);
  s.push_back(choice("model", "precision",
                     "Compute precision: `bf16` (bf16 weights/activations, fp32 accumulation) or "
                     "`fp32` (everything fp32, for tests). The start-up check of the collectives "
                     "runs in this type.",
                     &Config::model, &ModelConfig::precision,
                     std::vector<std::string>{"bf16", "fp32"}));

  // Shape keys: given only with preset = "custom" (defaults are the tiny preset's).
  auto shape_int = [&](const char* key, std::int64_t ModelConfig::*member, double min, const char* meaning) {
    s.push_back(with_max(with_min(field("model", key, VK::integer, meaning, &Config::model, member), min),
                         kMaxInt));
  };
  auto shape_real = [&](const char* key, double ModelConfig::*member, const char* meaning) {
    s.push_back(with_min(field("model", key, VK::real, meaning, &Config::model, member), 0.0, true));
  };
  shape_int("vocab_size", &ModelConfig::vocab_size, 2, "Vocabulary size (custom shapes).");
  shape_int("d_model", &ModelConfig::d_model, 1, "Width of the residual stream (custom shapes).");
  shape_int("n_layers", &ModelConfig::n_layers, 1, "Decoder layers (custom shapes).");
  shape_int("n_heads", &ModelConfig::n_heads, 1, "Query heads (custom shapes).");
  shape_int("n_kv_heads", &ModelConfig::n_kv_heads, 1,
            "Key/value heads; divides n_heads (grouped-query attention; custom shapes).");
  shape_int("head_dim", &ModelConfig::head_dim, 2, "Dimension of one head; even (custom shapes).");
  shape_int("d_ff", &ModelConfig::d_ff, 1, "Hidden width of the SwiGLU MLP (custom shapes).");
  shape_real("rope_theta", &ModelConfig::rope_theta, "RoPE base (custom shapes).");
  s.push_back(with_min(field("model", "rope_scaling_factor", VK::real,
                             "Llama 3 RoPE frequency scaling (Hugging Face rope_type \"llama3\"): wavelengths beyond "
                             "rope_original_max_position / rope_low_freq_factor are stretched by this factor, those "
                             "between it and / rope_high_freq_factor interpolated; 0: plain RoPE (custom shapes).",
                             &Config::model, &ModelConfig::rope_scaling_factor),
                       0.0));
  shape_real("rope_low_freq_factor", &ModelConfig::rope_low_freq_factor,
             "Llama 3 RoPE scaling's low_freq_factor (custom shapes).");
  shape_real("rope_high_freq_factor", &ModelConfig::rope_high_freq_factor,
             "Llama 3 RoPE scaling's high_freq_factor, above rope_low_freq_factor (custom shapes).");
  shape_int("rope_original_max_position", &ModelConfig::rope_original_max_position, 1,
            "Llama 3 RoPE scaling's original_max_position_embeddings (custom shapes).");
  shape_real("norm_eps", &ModelConfig::norm_eps, "RMSNorm epsilon (custom shapes).");
  s.push_back(field("model", "qk_norm", VK::boolean, "Per-head RMSNorm on q and k, as in Qwen3 (custom shapes).",
                    &Config::model, &ModelConfig::qk_norm));
  s.push_back(field("model", "tie_embeddings", VK::boolean,
                    "The LM head reuses the token embedding matrix (custom shapes).", &Config::model,
                    &ModelConfig::tie_embeddings));
  shape_int("max_seq_len", &ModelConfig::max_seq_len, 1, "Longest sequence the model accepts (custom shapes).");
  shape_int("n_experts", &ModelConfig::n_experts, 0,
            "Experts of each mixture-of-experts MLP; 0: every MLP dense (custom shapes).");
  shape_int("top_k", &ModelConfig::top_k, 1,
            "Experts each token is routed to, their gates renormalised to sum to 1 (MoE; custom shapes).");
  shape_int("d_ff_expert", &ModelConfig::d_ff_expert, 1,
            "Hidden width of each expert's SwiGLU MLP and of the shared expert (MoE; custom shapes).");
  shape_int("moe_every", &ModelConfig::moe_every, 1,
            "Decoder layer l has a mixture-of-experts MLP when (l + 1) is a multiple of this; the others "
            "are dense (MoE; custom shapes).");
  s.push_back(field("model", "shared_expert", VK::boolean,
                    "Every token also passes through one shared expert (MoE; custom shapes).", &Config::model,
                    &ModelConfig::shared_expert));
  s.push_back(with_min(field("model", "aux_loss_coef", VK::real,
                             "Weight of the load-balancing loss (Hugging Face's router_aux_loss_coef) of each MoE "
                             "layer; 0 turns it off.",
                             &Config::model, &ModelConfig::aux_loss_coef),
                       0.0));
  s.push_back(choice("model", "moe_impl",
                     "How an MoE layer runs its experts' GEMMs: `grouped` (each matrix of all experts in one "
                     "grouped call) or `loop` (one expert at a time); both read the experts from the layer's one "
                     "gathered unit.",
                     &Config::model, &ModelConfig::moe_impl, std::vector<std::string>{"grouped", "loop"}));
  s.push_back(choice("model", "attention",
                     "How training and prefill compute attention: `auto`, on GPU builds when model.precision = "
                     "\"bf16\" and head_dim is 64 or 128 `cudnn` where the build has cuDNN and `flash` where not, "
                     "otherwise batched GEMMs; `flash`, the tensor-core flash kernels; `gemm`, batched GEMMs with the S x S scores materialised per (row, "
                     "kv head) block (the reference path, and the only one on CPU builds); `cudnn`, cuDNN's fused "
                     "attention for training batches of right-padded rows (set without positions: the SFT "
                     "warm-up), the flash kernels for the RL train phase's rows (packed or not) and prefill (GPU "
                     "builds configured with cuDNN 9).",
                     &Config::model, &ModelConfig::attention,
                     std::vector<std::string>{"auto", "flash", "gemm", "cudnn"}));
  s.push_back(with_max(with_min(field("model", "cudnn_workspace_mib", VK::integer,
                                      "The most device memory (MiB) cuDNN's attention backward may take: its "
                                      "deterministic backward holds the S x S score gradients of the rows it runs "
                                      "at once, so it runs the micro-batch's rows in calls that fit; where one row "
                                      "does not fit (long sequences), calls of one row and as many kv heads as fit; "
                                      "where one kv head does not, training takes the flash kernels.",
                                      &Config::model, &ModelConfig::cudnn_workspace_mib),
                                1),
                       kMaxInt));
  s.push_back(field("model", "tokenizer", VK::string,
                    "A directory with the model's tokenizer.json (and tokenizer_config.json with its chat template), "
                    "for rl.task = \"text\"; empty: model.init_from's.",
                    &Config::model, &ModelConfig::tokenizer));
  s.push_back(field("model", "init_from", VK::string,
                    "A Hugging Face model directory (config.json and model.safetensors, or the shards of "
                    "model.safetensors.index.json) whose weights a fresh job starts from instead of random ones; "
                    "its config.json must describe the job's model, and gives the shape with preset = \"custom\" "
                    "and no shape keys. Empty: random initialisation. A resumed job reads its checkpoint instead, but for "
                    "a LoRA job (lora.rank > 0), whose frozen base this is, read on resume too and checked against "
                    "the checksum the checkpoint recorded.",
                    &Config::model, &ModelConfig::init_from));
  s.push_back(with_min(field("model", "init_std", VK::real,
                             "Standard deviation of the normal initialisation of fresh matrices "
                             "(norm weights start at 1).",
                             &Config::model, &ModelConfig::init_std),
                       0.0, true));

  s.push_back(with_max(with_min(field("lora", "rank", VK::integer,
                                      "Low-rank adapters on a frozen base (docs/lora.md): the rank r of each "
                                      "adapter; 0 trains every weight (full fine-tuning).",
                                      &Config::lora, &LoraConfig::rank),
                                0),
                       kMaxInt));
  s.push_back(with_min(field("lora", "alpha", VK::real, "Adapters' scale numerator: their output is scaled by alpha / rank.",
                             &Config::lora, &LoraConfig::alpha),
                       0.0, true));
  s.push_back(field("lora", "targets", VK::string_list,
                    "The linear layers that carry adapters, any of `q`, `k`, `v`, `o`, `gate`, `up`, `down`, and "
                    "`experts` (every expert's gate, up and down projections) on mixture-of-experts models.",
                    &Config::lora, &LoraConfig::targets));
  s.back().check = [](const ConfigValue& v) -> std::string {
    for (const std::string& t : std::get<std::vector<std::string>>(v)) {
      bool known = t == "experts";
      for (const char* target : kLoraTargetNames) known |= t == target;
      if (!known) return fmt::format("unknown target \"{}\" (any of q, k, v, o, gate, up, down, experts)", t);
    }
    return "";
  };
  s.push_back(choice("lora", "init",
                     "Each adapter's A at the start (B starts at zero, as PEFT does): `gaussian`, normal with "
                     "standard deviation 1 / rank; `kaiming`, uniform in +-1 / sqrt(in).",
                     &Config::lora, &LoraConfig::init, std::vector<std::string>{"gaussian", "kaiming"}));
  s.push_back(field("lora", "init_from", VK::string,
                    "A PEFT adapter directory (adapter_config.json, adapter_model.safetensors, as "
                    "`PeftModel.save_pretrained` and `shardrl convert --to-peft` write them) to start the adapters "
                    "from, over model.init_from's base: its r, lora_alpha and target_modules must equal lora.rank, "
                    "lora.alpha and lora.targets. Empty: fresh adapters (lora.init). Only a fresh run reads it; a "
                    "resumed one continues from its checkpoint's adapters.",
                    &Config::lora, &LoraConfig::init_from));
}

}  // namespace shardrl::schema_keys
