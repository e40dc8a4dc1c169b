#include "job/peft_adapter.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/json_parse_message.hpp"
#include "io/safetensors.hpp"
#include "mpi/host_exchange.hpp"

namespace shardrl {
namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

// PEFT's target_modules entry of a target: the module's last name ("q_proj").
std::string module_name(int t) {
  const std::string module = kLoraModules[t];
  return module.substr(module.find('.') + 1);
}

// PEFT's target_modules for `lora`: the adapted modules' last names; the experts' projections
// are named gate_proj, up_proj, down_proj like a dense MLP's (PEFT matches the last name).
std::set<std::string> peft_modules(const LoraShape& lora) {
  std::set<std::string> modules;
  for (int t = 0; t < kLoraTargets; ++t)
    if (lora.adapts(static_cast<LoraTarget>(t)) || (lora.experts && t >= static_cast<int>(LoraTarget::gate)))
      modules.insert(module_name(t));
  return modules;
}

// "(0|2|4)": the layers for which `keep` holds, as a regular expression's group.
template <class Keep>
std::string layer_group(const ModelShape& shape, Keep keep) {
  std::vector<int> layers;
  for (int l = 0; l < shape.n_layers; ++l)
    if (keep(l)) layers.push_back(l);
  return fmt::format("({})", fmt::join(layers, "|"));
}

}  // namespace

std::string peft_target_pattern(const ModelShape& shape) {
  if (shape.n_experts == 0) return "";
  const LoraShape& lora = shape.lora;
  std::vector<std::string> attention, mlp, alternatives;
  for (int t = 0; t < kLoraTargets; ++t)
    if (lora.adapts(static_cast<LoraTarget>(t)))
      (t < static_cast<int>(LoraTarget::gate) ? attention : mlp).push_back(module_name(t));
  if (!attention.empty())
    alternatives.push_back(fmt::format(R"(.*\.layers\.\d+\.self_attn\.({}))", fmt::join(attention, "|")));
  bool dense_layer = false;
  for (int l = 0; l < shape.n_layers; ++l) dense_layer |= !shape.moe_layer(l);
  if (!mlp.empty() && dense_layer)
    alternatives.push_back(fmt::format(R"(.*\.layers\.{}\.mlp\.({}))",
                                       layer_group(shape, [&](int l) { return !shape.moe_layer(l); }),
                                       fmt::join(mlp, "|")));
  if (lora.experts)
    alternatives.push_back(fmt::format(R"(.*\.layers\.{}\.mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj))",
                                       layer_group(shape, [&](int l) { return shape.moe_layer(l); })));
  return fmt::format("{}", fmt::join(alternatives, "|"));
}

std::string peft_tensor_name(const std::string& name) { return kPeftPrefix + name; }

std::string peft_adapter_config_json(const ModelShape& shape, const std::string& base_path) {
  const LoraShape& lora = shape.lora;
  nlohmann::ordered_json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(base_path);
  j["r"] = lora.rank;
  j["lora_alpha"] = lora.alpha;
  nlohmann::json modules = nlohmann::json::array();
  const std::set<std::string> ours = peft_modules(lora);
  for (int t = 0; t < kLoraTargets; ++t)   // in the model's order
    if (ours.count(module_name(t)) > 0) modules.push_back(module_name(t));
  const std::string pattern = peft_target_pattern(shape);
  j["target_modules"] = pattern.empty() ? nlohmann::ordered_json(modules) : nlohmann::ordered_json(pattern);
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

std::string peft_config_problem(const std::string& text, const std::string& where, const ModelShape& shape) {
  const LoraShape& lora = shape.lora;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("{}: not valid JSON: {}", where, json_parse_message(e.what()));
  }
  if (!j.is_object()) return where + ": not a JSON object";
  auto value = [&](const char* key) { return j.contains(key) ? j[key] : nlohmann::json(nullptr); };
  if (value("peft_type") != "LORA")
    return fmt::format("{}: peft_type is {}, a LoRA adapter's is \"LORA\"", where, value("peft_type").dump());
  if (!value("r").is_number_integer() || value("r").get<long>() != lora.rank)
    return fmt::format("{}: r = {}, and this job's lora.rank = {} (set lora.rank to the adapter's)", where,
                       value("r").dump(), lora.rank);
  // lora.alpha is a float: the adapter's alpha compared as one (0.1 in JSON is not 0.1f in double).
  if (!value("lora_alpha").is_number() || static_cast<float>(value("lora_alpha").get<double>()) != lora.alpha)
    return fmt::format("{}: lora_alpha = {}, and this job's lora.alpha = {} (set lora.alpha to the adapter's)", where,
                       value("lora_alpha").dump(), lora.alpha);
  // What the adapters would compute differently, or hold beyond A and B.
  const std::pair<const char*, bool> unsupported[] = {
      {"use_dora", value("use_dora").is_boolean() && value("use_dora").get<bool>()},
      {"use_rslora", value("use_rslora").is_boolean() && value("use_rslora").get<bool>()},
      {"fan_in_fan_out", value("fan_in_fan_out").is_boolean() && value("fan_in_fan_out").get<bool>()},
      {"bias", !value("bias").is_null() && value("bias") != "none"},
      {"modules_to_save", !value("modules_to_save").is_null() && !value("modules_to_save").empty()},
      {"layers_to_transform", !value("layers_to_transform").is_null()},
      {"rank_pattern", !value("rank_pattern").is_null() && !value("rank_pattern").empty()},
      {"alpha_pattern", !value("alpha_pattern").is_null() && !value("alpha_pattern").empty()}};
  for (const auto& [key, set] : unsupported)
    if (set) return fmt::format("{}: {} = {}: shardrl's adapters are plain LoRA (A and B on linear layers)", where, key,
                                value(key).dump());
  // PiSSA, OLoRA and CorDA take their adapters out of the base weights (the base PEFT saves is the
  // residual), LoftQ out of a quantized base: over the original model they compute something else.
  if (const nlohmann::json init = value("init_lora_weights"); init.is_string()) {
    const std::string v = init.get<std::string>();
    for (const char* changed : {"pissa", "olora", "corda", "loftq"})
      if (v.rfind(changed, 0) == 0)
        return fmt::format("{}: init_lora_weights = {}: these adapters belong over the base PEFT changed when it made "
                           "them, not over model.init_from's (save them with PEFT's "
                           "path_initial_model_for_weight_conversion to have plain LoRA over the original)",
                           where, init.dump());
  }
  std::set<std::string> theirs;
  const nlohmann::json modules = value("target_modules");
  const std::string pattern = peft_target_pattern(shape);
  if (modules.is_string() && !pattern.empty() && modules == pattern) return "";
  if (modules == "all-linear") {
    for (int t = 0; t < kLoraTargets; ++t) theirs.insert(module_name(t));
  } else if (modules.is_array()) {
    for (const auto& m : modules) {
      if (!m.is_string()) return fmt::format("{}: target_modules holds {}, not a module name", where, m.dump());
      theirs.insert(m.get<std::string>());
    }
  } else {
    return fmt::format("{}: target_modules = {}: shardrl reads a list of module names, \"all-linear\", or the "
                       "pattern its export writes for a mixture-of-experts model of this job's lora.targets{}",
                       where, modules.dump(), pattern.empty() ? "" : fmt::format(" ({:?})", pattern));
  }
  const std::set<std::string> ours = peft_modules(lora);
  std::vector<std::string> short_names;
  if (theirs != ours) {
    for (const std::string& m : theirs) {
      bool known = false;
      for (int t = 0; t < kLoraTargets; ++t) known |= module_name(t) == m;
      if (!known) return fmt::format("{}: target_modules names {}, which is not one of q_proj, k_proj, v_proj, "
                                     "o_proj, gate_proj, up_proj, down_proj", where, m);
    }
    for (int t = 0; t < kLoraTargets; ++t)
      if (theirs.count(module_name(t)) > 0) short_names.push_back(fmt::format("\"{}\"", kLoraTargetNames[t]));
    return fmt::format("{}: target_modules = {}, which differ from this job's lora.targets (set lora.targets = [{}])",
                       where, modules.dump(), fmt::join(short_names, ", "));
  }
  return "";
}

void load_peft_adapters(const std::filesystem::path& dir, ShardedTrainer& trainer, const std::vector<UnitSpec>& units,
                        const ModelShape& shape, MPI_Comm comm) {
  // This rank's first problem: a file it cannot read or that does not fit (a path only some ranks
  // see), a read of its own slices that failed, a value not finite. Every rank reaches the
  // agreement with it, so none waits there for a rank that stopped.
  std::string problem;
  try {
    const std::filesystem::path config = dir / "adapter_config.json";
    if (const std::string refused = peft_config_problem(read_input_file(config, "PEFT adapter config"), config.string(),
                                                        shape);
        !refused.empty())
      throw InputError(refused);
    const SafetensorsFile file(dir / "adapter_model.safetensors");
    const std::string where = file.path().string();
    // Every tensor of the file must be one of the model's adapters: anything else would be dropped.
    std::set<std::string> expected;
    for (const UnitSpec& unit : units)
      for (const ParamSpec& p : unit.params)
        if (unit.trains(p, true)) expected.insert(peft_tensor_name(p.name));
    for (const StTensor& t : file.header().tensors)
      if (expected.count(t.name) == 0)
        throw InputError(fmt::format("{}: tensor '{}' is not one of this job's adapters (its layers, lora.targets)",
                                     where, t.name));
    const ShardLayout& layout = trainer.layout();
    for (int u = 0; u < layout.unit_count(); ++u) {
      const UnitSpec& unit = units[static_cast<std::size_t>(u)];
      if (unit.adapters_begin < 0) continue;
      std::vector<float> slice = trainer.read_slice(u, SliceState::main);
      for (const ParamSpec& p : unit.params) {
        if (!unit.trains(p, true)) continue;
        const std::string name = peft_tensor_name(p.name);
        const StTensor* t = file.find(name);
        if (!t) throw InputError(fmt::format("{}: no tensor '{}', an adapter this job has (lora.targets)", where, name));
        if (t->shape != p.shape)
          throw InputError(fmt::format("{}: tensor '{}': shape ({}), the job's adapter's is ({})", where, name,
                                       fmt::join(t->shape, ", "), fmt::join(p.shape, ", ")));
        const ParamOverlap o = layout.state_overlap(u, p);
        if (o.count == 0 || !problem.empty()) continue;
        try {
          const std::vector<float> values = file.read_f32(name, o.first, o.count);
          for (std::size_t k = 0; k < values.size() && problem.empty(); ++k)
            if (!std::isfinite(values[k]))
              problem = fmt::format("{}: tensor '{}' holds {} at element {}: adapters' weights are finite", where, name,
                                    values[k], static_cast<std::uint64_t>(o.first) + k);
          std::copy(values.begin(), values.end(), slice.begin() + o.at);
        } catch (const std::exception& e) {
          problem = e.what();
        }
      }
      trainer.write_slice(u, SliceState::main, slice);
    }
  } catch (const std::exception& e) {
    if (problem.empty()) problem = e.what();
  }
  agree_on_error(comm, problem);
}

}  // namespace shardrl
