#include "job/hf_config.hpp"

#include <cmath>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "config/schema.hpp"
#include "core/input_file.hpp"
#include "io/json_parse_message.hpp"

namespace shardrl {

std::string hf_config_json(const ModelShape& s, const std::string& torch_dtype, const std::string& token_ids) {
  if (s.shared_expert)
    throw InputError("no Hugging Face architecture has an ungated shared expert beside Qwen3-MoE's experts "
                     "(model.shared_expert = true)");
  // Qwen3-MoE's attention always normalises q and k (transformers would fill absent norms with
  // ones and still normalise): a shape without them would compute something else there.
  if (s.n_experts > 0 && !s.qk_norm)
    throw InputError("no Hugging Face architecture has mixture-of-experts layers without q/k norms "
                     "(model.n_experts > 0 with model.qk_norm = false): Qwen3-MoE's attention normalises q and k");
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
  if (s.rope_scaling_factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", std::stod(fmt::format("{}", s.rope_scaling_factor))},
                         {"low_freq_factor", std::stod(fmt::format("{}", s.rope_low_freq_factor))},
                         {"high_freq_factor", std::stod(fmt::format("{}", s.rope_high_freq_factor))},
                         {"original_max_position_embeddings", s.rope_original_max_position}};
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
  const auto ids = nlohmann::ordered_json::parse(token_ids);   // kept alive for items()
  for (const auto& [key, value] : ids.items()) j[key] = value;
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace shardrl

namespace shardrl {

ModelShape shape_from_hf_config(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(where + ": not valid JSON: " + json_parse_message(e.what()));
  }
  auto fail = [&](const std::string& problem) { throw InputError(where + ": " + problem); };
  if (!j.is_object()) fail("not a JSON object");
  // Typed reads that name the key: nlohmann's value() throws its own type_error on a present key
  // of another type (null included).
  auto text_or = [&](const nlohmann::json& o, const std::string& in, const char* key, const std::string& fallback) {
    if (!o.contains(key)) return fallback;
    if (!o[key].is_string()) fail(in + key + ": not a string");
    return o[key].get<std::string>();
  };
  auto flag_or = [&](const char* key, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) fail(std::string(key) + ": not true or false");
    return j[key].get<bool>();
  };
  const std::string type = text_or(j, "", "model_type", "");
  if (type != "llama" && type != "qwen3" && type != "qwen3_moe")
    fail("model_type \"" + type + "\": shardrl builds llama, qwen3 and qwen3_moe models");
  auto integer = [&](const char* key) -> int {
    if (!j.contains(key) || !j[key].is_number_integer()) fail(std::string(key) + ": missing or not an integer");
    // Read in 64 bits (unsigned too) and range-check, naming the value given: a silent cast to int
    // would report 2^40 as 0.
    const bool fits = j[key].is_number_unsigned() ? j[key].get<std::uint64_t>() <= std::uint64_t(INT_MAX)
                                                  : j[key].get<std::int64_t>() >= 0 &&
                                                        j[key].get<std::int64_t>() <= INT_MAX;
    if (!fits) fail(fmt::format("{} = {}: out of range (0 to {})", key, j[key].dump(), INT_MAX));
    return static_cast<int>(j[key].get<std::int64_t>());
  };
  auto real = [&](const char* key, double fallback) -> double {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) fail(std::string(key) + ": not a number");
    return j[key].get<double>();
  };
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
      fail(std::string(key) + " = true: shardrl's linear layers have no biases");
  // What the layers compute besides their shape: a model that needs another activation or
  // windowed attention would be imported and compute something else.
  if (const std::string act = text_or(j, "", "hidden_act", "silu"); act != "silu")
    fail("hidden_act \"" + act + "\": shardrl's MLP is SwiGLU (silu)");
  if (flag_or("use_sliding_window", false))
    fail("use_sliding_window = true: shardrl attends over the whole context");
  // RoPE: transformers 4 writes rope_theta (and rope_scaling when scaled); transformers 5 writes
  // rope_parameters {rope_type, rope_theta, ...}. rope_type "default" is plain RoPE, "llama3"
  // Llama 3's frequency scaling (its four numbers required); any other type is refused.
  // A rotation of part of each head (partial_rotary_factor other than 1; null is transformers'
  // default, 1), at the top level, where transformers reads it, or among the RoPE parameters.
  const auto partial_rotation = [](const nlohmann::json& o) {
    if (!o.contains("partial_rotary_factor") || o["partial_rotary_factor"].is_null()) return false;
    return !(o["partial_rotary_factor"].is_number() && o["partial_rotary_factor"].get<double>() == 1.0);
  };
  if (partial_rotation(j)) fail("partial_rotary_factor: shardrl rotates the whole head");
  double rope_theta = 0;
  double llama3[4] = {0, 0, 0, 0};   // factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const nlohmann::json& r = j[key];
    if (!r.is_object()) fail(std::string(key) + ": not an object");
    // Parameters per layer type ({"full_attention": {...}, "sliding_attention": {...}}) or a
    // partial rotation would be read as plain RoPE at the default theta: refused.
    for (auto it = r.begin(); it != r.end(); ++it)
      if (it.value().is_object())
        fail(std::string(key) + "." + it.key() + ": RoPE parameters per layer type are not read by shardrl");
    if (partial_rotation(r)) fail(std::string(key) + ".partial_rotary_factor: shardrl rotates the whole head");
    const std::string rope_type =
        text_or(r, std::string(key) + ".", "rope_type", text_or(r, std::string(key) + ".", "type", "default"));
    if (rope_type == "llama3") {
      const char* names[4] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
      for (int k = 0; k < 4; ++k) {
        if (!r.contains(names[k]) || !r[names[k]].is_number() || !(r[names[k]].get<double>() > 0))
          fail(std::string(key) + "." + names[k] + ": rope_type \"llama3\" needs a positive number");
        llama3[k] = r[names[k]].get<double>();
      }
    } else if (rope_type != "default") {
      fail(std::string(key) + ".rope_type \"" + rope_type +
           "\": shardrl implements plain RoPE (\"default\") and Llama 3's scaling (\"llama3\")");
    }
    if (r.contains("rope_theta")) {
      if (!r["rope_theta"].is_number()) fail(std::string(key) + ".rope_theta: not a number");
      rope_theta = r["rope_theta"].get<double>();
    }
  }
  ModelShape s;
  s.vocab_size = integer("vocab_size");
  s.d_model = integer("hidden_size");
  s.n_layers = integer("num_hidden_layers");
  s.n_heads = integer("num_attention_heads");
  if (s.n_heads == 0) fail("num_attention_heads = 0: a model needs at least one attention head");
  // Where a key is missing transformers takes its class's default: Llama's are derived from the
  // model's width and heads, as here; Qwen3's are fixed numbers (32 key/value heads, head_dim
  // 128) that shardrl does not guess.
  if (type == "qwen3" || type == "qwen3_moe")
    for (const char* key : {"num_key_value_heads", "head_dim"})
      if (!j.contains(key) || j[key].is_null())
        fail(std::string(key) + " missing: transformers' " + type + " then takes a fixed default; write the model's");
  // Missing or null: as many as the query heads (transformers' Llama: None means n_heads).
  s.n_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null() ? integer("num_key_value_heads")
                                                                                        : s.n_heads;
  s.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? integer("head_dim") : s.d_model / s.n_heads;
  s.d_ff = integer("intermediate_size");
  s.rope_theta = static_cast<float>(real("rope_theta", rope_theta > 0 ? rope_theta : 10000.0));
  if (llama3[0] > 0) {
    if (llama3[3] > INT32_MAX || llama3[3] != std::floor(llama3[3]))
      fail("rope_scaling.original_max_position_embeddings: not an integer position count");
    s.rope_scaling_factor = static_cast<float>(llama3[0]);
    s.rope_low_freq_factor = static_cast<float>(llama3[1]);
    s.rope_high_freq_factor = static_cast<float>(llama3[2]);
    s.rope_original_max_position = static_cast<int>(llama3[3]);
  }
  s.norm_eps = static_cast<float>(real("rms_norm_eps", 1e-6));
  s.qk_norm = type != "llama";
  s.tie_embeddings = flag_or("tie_word_embeddings", false);
  s.max_seq_len = integer("max_position_embeddings");
  if (type == "qwen3_moe") {
    // transformers 4 writes num_experts; later versions may write the Mixtral spelling.
    s.n_experts = integer(j.contains("num_experts") || !j.contains("num_local_experts") ? "num_experts"
                                                                                        : "num_local_experts");
    s.top_k = integer("num_experts_per_tok");
    s.d_ff_expert = integer("moe_intermediate_size");
    s.moe_every = j.contains("decoder_sparse_step") ? integer("decoder_sparse_step") : 1;
    if (!flag_or("norm_topk_prob", false)) fail("norm_topk_prob = false: shardrl renormalises the top-k gates");
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].empty())
      fail("mlp_only_layers is not empty: shardrl places dense layers by decoder_sparse_step only");
  }
  return s;
}

std::string hf_job_config_toml(const std::filesystem::path& dir) {
  const std::string text = read_input_file(dir / "config.json", "model config");
  const ModelShape s = shape_from_hf_config(text, (dir / "config.json").string());
  std::string t = fmt::format(
      "[model]\npreset = \"custom\"\nvocab_size = {}\nd_model = {}\nn_layers = {}\nn_heads = {}\nn_kv_heads = {}\n"
      "head_dim = {}\nd_ff = {}\nrope_theta = {}\nnorm_eps = {}\nqk_norm = {}\ntie_embeddings = {}\nmax_seq_len = {}\n",
      s.vocab_size, s.d_model, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, s.d_ff, s.rope_theta, s.norm_eps,
      s.qk_norm, s.tie_embeddings, s.max_seq_len);
  if (s.rope_scaling_factor > 0)
    t += fmt::format("rope_scaling_factor = {}\nrope_low_freq_factor = {}\nrope_high_freq_factor = {}\n"
                     "rope_original_max_position = {}\n",
                     s.rope_scaling_factor, s.rope_low_freq_factor, s.rope_high_freq_factor,
                     s.rope_original_max_position);
  if (s.n_experts > 0)
    t += fmt::format("n_experts = {}\ntop_k = {}\nd_ff_expert = {}\nmoe_every = {}\n", s.n_experts, s.top_k,
                     s.d_ff_expert, s.moe_every);
  // A conversion trains nothing: small buffers, as long as the default completion (rollout.max_new_tokens
  // = 64), which `generate` from the converted checkpoint draws; within a short model's positions
  // a completion leaves room for a prompt of one token (a model of 64 positions or fewer was
  // refused: "leaves no room for a prompt").
  const int seq_len = std::min(64, s.max_seq_len), max_new = std::min(64, s.max_seq_len - 1);
  // The directory as a TOML string, quoted and escaped (a name may hold `"`, `\` or `\u0031`); absolute,
  // so that an export from another working directory still finds its tokenizer, generation_config.json
  // and special-token ids (a relative one lost them, with notes only).
  t += fmt::format("init_from = {}\n[train]\nseq_len = {}\n",
                   to_toml_literal(ConfigValue(std::filesystem::absolute(dir).lexically_normal().string())), seq_len);
  if (max_new < 64) t += fmt::format("[rollout]\nmax_new_tokens = {}\n", max_new);
  return t;
}

}  // namespace shardrl
