// Hugging Face config.json <-> model shape: both transformers 4 (rope_theta, rope_scaling) and
// transformers 5 (rope_parameters) spellings of plain RoPE and of Llama 3's scaled RoPE are read;
// other scalings, biases and the features shardrl lacks are refused with the key named; an
// exported config reads back as the same shape. A PEFT adapter_config.json is compared with the
// job's adapters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "job/hf_config.hpp"
#include "job/peft_adapter.hpp"

namespace {

using shardrl::InputError;
using shardrl::ModelShape;
using shardrl::shape_from_hf_config;

const std::string kQwen3Body =
    R"("model_type": "qwen3", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 3,
       "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 512,
       "rms_norm_eps": 1e-06, "tie_word_embeddings": true, "max_position_embeddings": 256)";

std::string refusal(const std::string& json) {
  try {
    shape_from_hf_config(json, "dir/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, ReadsTransformers4And5RopeSpellings) {
  const ModelShape v4 = shape_from_hf_config("{" + kQwen3Body + R"(, "rope_theta": 1000000.0, "rope_scaling": null})",
                                             "v4");
  const ModelShape v5 = shape_from_hf_config(
      "{" + kQwen3Body + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})", "v5");
  for (const ModelShape& s : {v4, v5}) {
    EXPECT_EQ(s.rope_theta, 1e6f);
    EXPECT_EQ(s.d_model, 256);
    EXPECT_EQ(s.n_kv_heads, 4);
    EXPECT_EQ(s.head_dim, 32);
    EXPECT_TRUE(s.qk_norm);
    EXPECT_TRUE(s.tie_embeddings);
    EXPECT_FLOAT_EQ(s.norm_eps, 1e-6f);
  }
  // Experts under the Mixtral spelling too.
  const ModelShape moe = shape_from_hf_config(
      "{" + kQwen3Body + R"(, "model_type": "qwen3_moe", "num_local_experts": 8, "num_experts_per_tok": 2,
          "moe_intermediate_size": 64, "norm_topk_prob": true})",
      "moe");
  EXPECT_EQ(moe.n_experts, 8);
  EXPECT_EQ(moe.top_k, 2);
  EXPECT_EQ(moe.d_ff_expert, 64);
  // No theta anywhere: the transformers default for these architectures.
  EXPECT_EQ(shape_from_hf_config("{" + kQwen3Body + "}", "none").rope_theta, 10000.0f);
}

// Llama 3.2's rope_scaling, in both spellings, and back through the exporter.
TEST(HfConfig, ReadsAndWritesLlama3RopeScaling) {
  const std::string scaling =
      R"("rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192)";
  const ModelShape v4 = shape_from_hf_config(
      "{" + kQwen3Body + R"(, "model_type": "llama", "rope_theta": 500000.0, "rope_scaling": {)" + scaling + "}}", "v4");
  const ModelShape v5 = shape_from_hf_config(
      "{" + kQwen3Body + R"(, "model_type": "llama", "rope_parameters": {"rope_theta": 500000.0, )" + scaling + "}}",
      "v5");
  for (const ModelShape& s : {v4, v5}) {
    EXPECT_EQ(s.rope_theta, 5e5f);
    EXPECT_EQ(s.rope_scaling_factor, 32.0f);
    EXPECT_EQ(s.rope_low_freq_factor, 1.0f);
    EXPECT_EQ(s.rope_high_freq_factor, 4.0f);
    EXPECT_EQ(s.rope_original_max_position, 8192);
  }
  const ModelShape back = shape_from_hf_config(shardrl::hf_config_json(v4, "bfloat16"), "exported");
  EXPECT_EQ(back.rope_scaling_factor, 32.0f);
  EXPECT_EQ(back.rope_original_max_position, 8192);
  // Plain RoPE exports no rope_scaling at all.
  EXPECT_EQ(shardrl::hf_config_json(shape_from_hf_config("{" + kQwen3Body + "}", "plain"), "bfloat16")
                .find("rope_scaling"),
            std::string::npos);
}

TEST(HfConfig, RefusesWhatShardrlDoesNotImplementNamingTheKey) {
  // Llama 3 scaling without its four numbers.
  const std::string llama3 = refusal(
      "{" + kQwen3Body + R"(, "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}})");
  EXPECT_NE(llama3.find("rope_parameters.low_freq_factor: rope_type \"llama3\" needs a positive number"),
            std::string::npos)
      << llama3;
  const std::string yarn = refusal("{" + kQwen3Body + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})");
  EXPECT_NE(yarn.find("rope_scaling.rope_type \"yarn\""), std::string::npos) << yarn;
  const std::string scaled = refusal("{" + kQwen3Body + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  EXPECT_NE(scaled.find("rope_scaling.rope_type \"linear\""), std::string::npos) << scaled;
  const std::string bias = refusal("{" + kQwen3Body + R"(, "attention_bias": true})");
  EXPECT_NE(bias.find("attention_bias = true"), std::string::npos) << bias;
  // What the layers compute besides their shape (both were imported and computed otherwise).
  const std::string act = refusal("{" + kQwen3Body + R"(, "hidden_act": "gelu_pytorch_tanh"})");
  EXPECT_NE(act.find("hidden_act \"gelu_pytorch_tanh\": shardrl's MLP is SwiGLU"), std::string::npos) << act;
  const std::string window = refusal("{" + kQwen3Body + R"(, "use_sliding_window": true, "sliding_window": 4096})");
  EXPECT_NE(window.find("use_sliding_window = true"), std::string::npos) << window;
  EXPECT_NO_THROW(shape_from_hf_config("{" + kQwen3Body + R"(, "hidden_act": "silu", "use_sliding_window": false})",
                                       "qwen3"));
  const std::string type = refusal(R"({"model_type": "gpt2"})");
  EXPECT_NE(type.find("dir/config.json: model_type \"gpt2\""), std::string::npos) << type;
  const std::string missing = refusal(R"({"model_type": "llama", "vocab_size": 8})");
  EXPECT_NE(missing.find("hidden_size: missing"), std::string::npos) << missing;
  const std::string json = refusal("{\"model_type\": ");
  EXPECT_NE(json.find("dir/config.json: not valid JSON"), std::string::npos) << json;
  // Integers are read in 64 bits and the value given is named (2^40 was reported as 0).
  const std::string huge = refusal(R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 1099511627776})");
  EXPECT_NE(huge.find("hidden_size = 1099511627776: out of range (0 to 2147483647)"), std::string::npos) << huge;
  const std::string negative = refusal(R"({"model_type": "llama", "vocab_size": -3})");
  EXPECT_NE(negative.find("vocab_size = -3: out of range"), std::string::npos) << negative;
  // No heads: refused before head_dim = hidden_size / heads divides by zero.
  const std::string no_heads = refusal(R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 0, "intermediate_size": 16, "max_position_embeddings": 8})");
  EXPECT_NE(no_heads.find("num_attention_heads = 0"), std::string::npos) << no_heads;
  // RoPE parameters per layer type (transformers 5) were read as plain RoPE at theta 10 000, and a
  // partial rotation as a whole one: refused.
  const std::string per_type = refusal("{" + kQwen3Body +
                                       R"(, "rope_parameters": {"full_attention": {"rope_type": "default",
                                           "rope_theta": 500000.0}}})");
  EXPECT_NE(per_type.find("rope_parameters.full_attention: RoPE parameters per layer type are not read"),
            std::string::npos)
      << per_type;
  const std::string partial = refusal("{" + kQwen3Body + R"(, "rope_parameters": {"rope_type": "default",
      "rope_theta": 10000.0, "partial_rotary_factor": 0.5}})");
  EXPECT_NE(partial.find("rope_parameters.partial_rotary_factor: shardrl rotates the whole head"), std::string::npos)
      << partial;
  // At the top level too, where transformers reads it (it was imported as a whole rotation); 1 and
  // null are a whole one.
  const std::string top_partial = refusal("{" + kQwen3Body + R"(, "partial_rotary_factor": 0.5})");
  EXPECT_NE(top_partial.find("dir/config.json: partial_rotary_factor: shardrl rotates the whole head"),
            std::string::npos)
      << top_partial;
  EXPECT_EQ(refusal("{" + kQwen3Body + R"(, "partial_rotary_factor": 1.0})"), "");
  EXPECT_EQ(refusal("{" + kQwen3Body + R"(, "partial_rotary_factor": null})"), "");
  // Llama's num_key_value_heads null is transformers' None: as many as the query heads.
  EXPECT_EQ(shape_from_hf_config("{" + kQwen3Body + R"(, "model_type": "llama", "num_key_value_heads": null})", "llama")
                .n_kv_heads,
            8);
  // Qwen3 without head_dim or num_key_value_heads: transformers takes fixed defaults (128, 32),
  // which hidden_size / heads and the query heads were not.
  for (const char* key : {"\"head_dim\": 32, ", "\"num_key_value_heads\": 4, "}) {
    std::string body = kQwen3Body;
    body.erase(body.find(key), std::string(key).size());
    const std::string missing_key = refusal("{" + body + "}");
    EXPECT_NE(missing_key.find(" missing: transformers' qwen3 then takes a fixed default"), std::string::npos)
        << key << missing_key;
  }
  // Keys of the wrong type (null included) are named, as InputErrors (nlohmann's value() threw its
  // own type_error for them, an unexpected error without the file).
  const std::string tied = refusal("{" + kQwen3Body.substr(0, kQwen3Body.find("\"tie_word")) +
                                   R"("tie_word_embeddings": null, "max_position_embeddings": 256})");
  EXPECT_EQ(tied, "") << "null is the default";
  const std::string tied_text = refusal("{" + kQwen3Body.substr(0, kQwen3Body.find("\"tie_word")) +
                                        R"("tie_word_embeddings": "yes", "max_position_embeddings": 256})");
  EXPECT_NE(tied_text.find("dir/config.json: tie_word_embeddings: not true or false"), std::string::npos) << tied_text;
  const std::string type_number = refusal(R"({"model_type": 3})");
  EXPECT_NE(type_number.find("dir/config.json: model_type: not a string"), std::string::npos) << type_number;
  const std::string rope_null = refusal("{" + kQwen3Body + R"(, "rope_scaling": {"rope_type": null, "factor": 2.0}})");
  EXPECT_NE(rope_null.find("rope_scaling.rope_type: not a string"), std::string::npos) << rope_null;
}

// Qwen3-MoE's attention always normalises q and k: an MoE shape without q/k norms has no Hugging
// Face architecture (exported as Qwen3-MoE it would compute something else there).
TEST(HfConfig, RefusesToExportExpertsWithoutQkNorms) {
  ModelShape s;
  s.n_experts = 4;
  s.top_k = 2;
  s.d_ff_expert = 32;
  s.qk_norm = false;
  try {
    shardrl::hf_config_json(s, "float32");
    FAIL() << "exported";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.qk_norm = false"), std::string::npos) << e.what();
  }
}

TEST(HfConfig, ExportedConfigReadsBackAsTheSameShape) {
  ModelShape s;
  s.vocab_size = 1000;
  s.d_model = 128;
  s.n_layers = 4;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 32;
  s.d_ff = 384;
  s.rope_theta = 1e6f;
  s.norm_eps = 1e-5f;
  s.max_seq_len = 512;
  for (int variant = 0; variant < 3; ++variant) {
    ModelShape w = s;
    w.qk_norm = variant > 0;
    w.tie_embeddings = variant == 1;
    if (variant == 2) {
      w.n_experts = 8;
      w.top_k = 2;
      w.d_ff_expert = 64;
      w.moe_every = 2;
    }
    const ModelShape r = shape_from_hf_config(shardrl::hf_config_json(w, "float32"), "exported");
    EXPECT_EQ(r.vocab_size, w.vocab_size);
    EXPECT_EQ(r.d_model, w.d_model);
    EXPECT_EQ(r.n_layers, w.n_layers);
    EXPECT_EQ(r.n_heads, w.n_heads);
    EXPECT_EQ(r.n_kv_heads, w.n_kv_heads);
    EXPECT_EQ(r.head_dim, w.head_dim);
    EXPECT_EQ(r.d_ff, w.d_ff);
    EXPECT_EQ(r.rope_theta, w.rope_theta);
    EXPECT_EQ(r.norm_eps, w.norm_eps);
    EXPECT_EQ(r.qk_norm, w.qk_norm);
    EXPECT_EQ(r.tie_embeddings, w.tie_embeddings);
    EXPECT_EQ(r.max_seq_len, w.max_seq_len);
    EXPECT_EQ(r.n_experts, w.n_experts);
    EXPECT_EQ(r.top_k, w.top_k);
    EXPECT_EQ(r.d_ff_expert, w.d_ff_expert);
    EXPECT_EQ(r.moe_every, w.moe_every);
  }
}

// lora.alpha is a float: an adapter's lora_alpha of 0.1 is this job's 0.1 (compared as doubles,
// 0.1 and 0.1f differed, and the refusal read "lora_alpha = 0.1, and this job's lora.alpha = 0.1").
TEST(PeftConfig, AlphaIsComparedAsTheJobsFloat) {
  shardrl::ModelShape shape;
  shardrl::LoraShape& lora = shape.lora;
  lora.rank = 8;
  lora.alpha = 0.1f;
  lora.targets = 1u << static_cast<int>(shardrl::LoraTarget::q) | 1u << static_cast<int>(shardrl::LoraTarget::v);
  const std::string config = R"({"peft_type": "LORA", "r": 8, "lora_alpha": 0.1, "target_modules": ["q_proj", "v_proj"]})";
  EXPECT_EQ(shardrl::peft_config_problem(config, "x", shape), "");
  lora.alpha = 0.2f;
  EXPECT_NE(shardrl::peft_config_problem(config, "x", shape).find("lora_alpha = 0.1"), std::string::npos);
}

// Adapters PEFT initialised out of the base weights (PiSSA, OLoRA, CorDA) or a quantized base
// (LoftQ) belong over the base PEFT changed: refused over the original. PEFT's other inits are
// plain LoRA once trained.
TEST(PeftConfig, AdaptersOfABaseThatPeftChangedAreRefused) {
  shardrl::ModelShape shape;
  shape.lora.rank = 8;
  shape.lora.alpha = 16;
  shape.lora.targets = 1u << static_cast<int>(shardrl::LoraTarget::q);
  const auto with_init = [](const std::string& init) {
    return R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "init_lora_weights": )" +
           init + "}";
  };
  for (const char* init : {R"("pissa")", R"("pissa_niter_4")", R"("olora")", R"("corda")", R"("loftq")"})
    EXPECT_NE(shardrl::peft_config_problem(with_init(init), "x", shape)
                  .find(std::string("x: init_lora_weights = ") + init + ": these adapters belong over the base PEFT "
                                                                        "changed"),
              std::string::npos)
        << init;
  for (const char* init : {"true", "false", R"("gaussian")", R"("eva")", R"("orthogonal")"})
    EXPECT_EQ(shardrl::peft_config_problem(with_init(init), "x", shape), "") << init;
}

// A mixture-of-experts model's adapters name their modules by a pattern of whole names: the last
// names alone stand for the dense MLPs and the experts both (and a shared expert), so PEFT wrapped
// modules the file has no adapters for. The pattern names the layers: here 4 layers, every second
// one MoE (1 and 3). The import takes back exactly the pattern of the job's own targets.
TEST(PeftConfig, MixtureOfExpertsTargetsAreAPatternOfWholeModuleNames) {
  shardrl::ModelShape shape;
  shape.n_layers = 4;
  shape.n_experts = 4;
  shape.moe_every = 2;
  shape.lora.rank = 4;
  shape.lora.alpha = 8;
  shape.lora.targets = 1u << static_cast<int>(shardrl::LoraTarget::q) | 1u << static_cast<int>(shardrl::LoraTarget::down);
  shape.lora.experts = true;
  const std::string pattern = shardrl::peft_target_pattern(shape);
  EXPECT_EQ(pattern, R"(.*\.layers\.\d+\.self_attn\.(q_proj)|.*\.layers\.(0|2)\.mlp\.(down_proj)|)"
                     R"(.*\.layers\.(1|3)\.mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj))");
  const nlohmann::json written = nlohmann::json::parse(shardrl::peft_adapter_config_json(shape, "/base"));
  EXPECT_EQ(written.at("target_modules"), pattern);
  EXPECT_EQ(shardrl::peft_config_problem(written.dump(), "x", shape), "");
  shardrl::ModelShape fewer = shape;
  fewer.lora.experts = false;
  EXPECT_NE(shardrl::peft_config_problem(written.dump(), "x", fewer).find("the pattern its export writes"),
            std::string::npos);
  shardrl::ModelShape dense = shape;
  dense.n_experts = 0;
  dense.lora.experts = false;
  EXPECT_EQ(shardrl::peft_target_pattern(dense), "");
  EXPECT_EQ(nlohmann::json::parse(shardrl::peft_adapter_config_json(dense, "")).at("target_modules"),
            nlohmann::json::array({"q_proj", "down_proj"}));
}

}  // namespace
