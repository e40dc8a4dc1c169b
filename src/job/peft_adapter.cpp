#include "job/peft_adapter.hpp"

#include <nlohmann/json.hpp>

namespace shardrl {

std::string peft_tensor_name(const std::string& name) { return "base_model.model." + name; }

std::string peft_adapter_config_json(const LoraShape& lora, const std::string& base_path) {
  nlohmann::ordered_json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(base_path);
  j["r"] = lora.rank;
  j["lora_alpha"] = lora.alpha;
  nlohmann::json modules = nlohmann::json::array();
  for (int t = 0; t < kLoraTargets; ++t)
    if (lora.adapts(static_cast<LoraTarget>(t))) {
      const std::string module = kLoraModules[t];   // "self_attn.q_proj": PEFT matches the last name
      modules.push_back(module.substr(module.find('.') + 1));
    }
  j["target_modules"] = modules;
  j["lora_dropout"] = 0.0;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["modules_to_save"] = nullptr;
  j["init_lora_weights"] = lora.kaiming ? nlohmann::json(true) : nlohmann::json("gaussian");
  j["inference_mode"] = true;
  return j.dump(2) + "\n";
}

}  // namespace shardrl
