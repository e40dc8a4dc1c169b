#include "app/hf_config.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"

namespace shardrl {

std::string hf_config_json(const ModelShape& s, const std::string& torch_dtype) {
  if (s.shared_expert)
    throw InputError("no Hugging Face architecture has an ungated shared expert beside Qwen3-MoE's experts "
                     "(model.shared_expert = true)");
  nlohmann::ordered_json j;
  const bool moe = s.n_experts > 0;
  if (moe) {
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["model_type"] = "qwen3_moe";
  } else if (s.qk_norm) {
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["model_type"] = "qwen3";
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
  }
  j["vocab_size"] = s.vocab_size;
  j["hidden_size"] = s.d_model;
  j["intermediate_size"] = s.d_ff;
  j["num_hidden_layers"] = s.n_layers;
  j["num_attention_heads"] = s.n_heads;
  j["num_key_value_heads"] = s.n_kv_heads;
  j["head_dim"] = s.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = s.max_seq_len;
  // The shape keeps floats: written as the shortest decimal that reads back to them (1e-06, not
  // 9.99999997e-07).
  j["rms_norm_eps"] = std::stod(fmt::format("{}", s.norm_eps));
  j["rope_theta"] = std::stod(fmt::format("{}", s.rope_theta));
  j["tie_word_embeddings"] = s.tie_embeddings;
  j["attention_bias"] = false;
  if (!moe && !s.qk_norm) j["mlp_bias"] = false;
  if (moe) {
    j["num_experts"] = s.n_experts;
    j["num_experts_per_tok"] = s.top_k;
    j["moe_intermediate_size"] = s.d_ff_expert;
    j["decoder_sparse_step"] = s.moe_every;
    j["norm_topk_prob"] = true;
    // Hugging Face's dense layers of a Qwen3-MoE model are those not on the sparse step.
    j["mlp_only_layers"] = nlohmann::json::array();
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace shardrl
