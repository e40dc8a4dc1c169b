// TOML and --set parsing and whole-config validation. Every problem is collected, none stops
// the scan, so a user fixes a config in one round.
#include "config/load.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "config/model_presets.hpp"
#include "config/schema.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"
#include "rl/tokenizer.hpp"

namespace shardrl {
namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> all_sections() {
  std::vector<std::string> out;
  for (const auto& d : config_schema())
    if (std::find(out.begin(), out.end(), d.section) == out.end()) out.push_back(d.section);
  return out;
}

// "(did you mean 'run.seed'?)" for a key that is misspelt or sits in the wrong section.
std::string key_suggestion(const std::string& section, const std::string& key) {
  for (const auto& d : config_schema())
    if (d.key == key) return fmt::format(" (did you mean '{}'?)", d.full_name());
  std::vector<std::string> names;
  for (const auto& d : config_schema()) names.push_back(d.full_name());
  std::string best = closest_match(section + "." + key, names);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::string node_type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

const char* expected_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::boolean: return "a boolean (true or false)";
    case ValueKind::integer: return "an integer";
    case ValueKind::real: return "a number";
    case ValueKind::string: return "a string";
    case ValueKind::choice: return "a string";
    case ValueKind::string_list: return "an array of strings";
  }
  return "?";
}

// Range, choice and custom checks of a well-typed value; "" when valid.
std::string value_problem(const KeyDef& def, const ConfigValue& v) {
  if (def.kind == ValueKind::integer || def.kind == ValueKind::real) {
    double x = std::holds_alternative<std::int64_t>(v) ? static_cast<double>(std::get<std::int64_t>(v))
                                                       : std::get<double>(v);
    if (!std::isfinite(x)) return fmt::format("must be a finite number, got {}", to_toml_literal(v));
    // The job computes in single precision: a real outside it would become 0 or inf there
    // (optim.eps = 1e-50 passed "> 0" and divided by a zero epsilon).
    if (def.kind == ValueKind::real && x != 0 &&
        (std::fabs(x) < std::numeric_limits<float>::min() || std::fabs(x) > std::numeric_limits<float>::max()))
      return fmt::format("must lie within single precision's range ({:g} to {:g} in magnitude, or 0), got {}",
                         std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), to_toml_literal(v));
    if (def.min && (x < *def.min || (def.min_exclusive && x == *def.min)))
      return fmt::format("must be {} {}, got {}", def.min_exclusive ? ">" : ">=",
                         to_toml_literal(def.kind == ValueKind::integer
                                             ? ConfigValue(static_cast<std::int64_t>(*def.min))
                                             : ConfigValue(*def.min)),
                         to_toml_literal(v));
    if (def.max && x > *def.max)
      return fmt::format("must be <= {}, got {}",
                         to_toml_literal(def.kind == ValueKind::integer
                                             ? ConfigValue(static_cast<std::int64_t>(*def.max))
                                             : ConfigValue(*def.max)),
                         to_toml_literal(v));
  }
  if (def.kind == ValueKind::choice) {
    const auto& s = std::get<std::string>(v);
    if (std::find(def.choices.begin(), def.choices.end(), s) == def.choices.end()) {
      std::string list;
      for (const auto& c : def.choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
      return fmt::format("must be one of {}, got \"{}\"", list, s);
    }
  }
  if (def.check) return def.check(v);
  return "";
}

// Converts a TOML node to the key's type; sets `problem` when the type is wrong.
std::optional<ConfigValue> from_toml(const KeyDef& def, const toml::node& node,
                                     std::string& problem) {
  switch (def.kind) {
    case ValueKind::boolean:
      if (auto b = node.as_boolean()) return ConfigValue(b->get());
      break;
    case ValueKind::integer:
      if (auto i = node.as_integer()) return ConfigValue(static_cast<std::int64_t>(i->get()));
      break;
    case ValueKind::real:
      if (auto f = node.as_floating_point()) return ConfigValue(f->get());
      if (auto i = node.as_integer()) return ConfigValue(static_cast<double>(i->get()));
      break;
    case ValueKind::string:
    case ValueKind::choice:
      if (auto s = node.as_string()) return ConfigValue(s->get());
      break;
    case ValueKind::string_list:
      if (auto a = node.as_array()) {
        std::vector<std::string> list;
        for (const toml::node& item : *a) {
          if (!item.as_string()) {
            problem = fmt::format("expected an array of strings, got an array holding {}", node_type_name(item.type()));
            return std::nullopt;
          }
          list.push_back(item.as_string()->get());
        }
        return ConfigValue(std::move(list));
      }
      break;
  }
  problem = fmt::format("expected {}, got {}", expected_name(def.kind), node_type_name(node.type()));
  return std::nullopt;
}

// Converts the text of a --set value to the key's type.
std::optional<ConfigValue> from_text(const KeyDef& def, const std::string& text,
                                     std::string& problem) {
  switch (def.kind) {
    case ValueKind::boolean:
      if (text == "true") return ConfigValue(true);
      if (text == "false") return ConfigValue(false);
      break;
    case ValueKind::integer: {
      std::int64_t x = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec == std::errc() && end == text.data() + text.size() && !text.empty())
        return ConfigValue(x);
      break;
    }
    case ValueKind::real: {
      char* end = nullptr;
      double x = std::strtod(text.c_str(), &end);
      if (!text.empty() && end == text.c_str() + text.size()) return ConfigValue(x);
      break;
    }
    case ValueKind::string:
    case ValueKind::choice:
      // Quotes are optional on the command line; a quoted value is read as a TOML string.
      if (!text.empty() && (text.front() == '"' || text.front() == '\'')) {
        try {
          auto t = toml::parse("v = " + text);
          if (auto s = t["v"].as_string()) return ConfigValue(s->get());
        } catch (const toml::parse_error&) {
        }
        problem = fmt::format("cannot read {} as a string", text);
        return std::nullopt;
      }
      return ConfigValue(text);
    case ValueKind::string_list:
      // A TOML array on the command line: --set 'rl.reward_command=["python3", "r.py"]'.
      try {
        auto t = toml::parse("v = " + text);
        if (const toml::node* v = t.get("v")) {
          std::string inner;
          if (auto list = from_toml(def, *v, inner)) return list;
          problem = inner;
          return std::nullopt;
        }
      } catch (const toml::parse_error&) {
      }
      break;
  }
  problem = fmt::format("expected {}, got '{}'", expected_name(def.kind), text);
  return std::nullopt;
}

std::string position(const std::string& source_name, const toml::source_region& r) {
  return fmt::format("{}:{}:{}", source_name, r.begin.line, r.begin.column);
}

void parse_toml(const std::string& text, const std::string& source_name, LoadedConfig& out) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    out.errors.push_back(fmt::format("{}: TOML syntax error: {}",
                                     position(source_name, e.source()), e.description()));
    return;
  }
  // toml++ iterates tables in key order; problems are reported in file order.
  std::vector<std::pair<toml::source_position, std::string>> problems;
  auto report = [&](const toml::node& node, std::string msg) {
    problems.emplace_back(node.source().begin, std::move(msg));
  };
  const auto sections = all_sections();
  for (auto&& [section_key, section_node] : root) {
    std::string section(section_key.str());
    std::string where = position(source_name, section_node.source());
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      std::string best = closest_match(section, sections);
      report(section_node, fmt::format("{}: unknown section [{}]{}", where, section,
                                       best.empty() ? "" : " (did you mean [" + best + "]?)"));
      continue;
    }
    const toml::table* table = section_node.as_table();
    if (!table) {
      report(section_node, fmt::format("{}: '{}' must be a section [{}], got {}", where, section,
                                       section, node_type_name(section_node.type())));
      continue;
    }
    for (auto&& [key_name, node] : *table) {
      std::string key(key_name.str());
      std::string at = position(source_name, node.source());
      const KeyDef* def = find_key(section, key);
      if (!def) {
        report(node, fmt::format("{}: unknown key '{}.{}'{}", at, section, key,
                                         key_suggestion(section, key)));
        continue;
      }
      std::string problem;
      auto value = from_toml(*def, node, problem);
      if (value && (problem = value_problem(*def, *value)).empty()) {
        def->set(out.config, *value);
        out.origin[def->full_name()] = at;
      } else {
        report(node, fmt::format("{}: {}: {}", at, def->full_name(), problem));
      }
    }
  }
  std::stable_sort(problems.begin(), problems.end(), [](const auto& a, const auto& b) {
    return a.first.line != b.first.line ? a.first.line < b.first.line : a.first.column < b.first.column;
  });
  for (auto& p : problems) out.errors.push_back(std::move(p.second));
}

void apply_override(const std::string& arg, LoadedConfig& out) {
  const std::string where = "--set " + arg;
  auto eq = arg.find('=');
  std::string name = arg.substr(0, eq);
  auto dot = name.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
    std::string hint;
    if (dot == std::string::npos) hint = key_suggestion("", name);
    out.errors.push_back(fmt::format("{}: expected section.key=value{}", where, hint));
    return;
  }
  std::string section = name.substr(0, dot), key = name.substr(dot + 1);
  const KeyDef* def = find_key(section, key);
  if (!def) {
    out.errors.push_back(fmt::format("{}: unknown key '{}'{}", where, name,
                                     key_suggestion(section, key)));
    return;
  }
  std::string problem;
  auto value = from_text(*def, arg.substr(eq + 1), problem);
  if (value && (problem = value_problem(*def, *value)).empty()) {
    def->set(out.config, *value);
    out.origin[name] = where;
  } else {
    out.errors.push_back(fmt::format("{}: {}: {}", where, name, problem));
  }
}

// Settings that are each valid but not together, or not on this build.
// The RL objective's keys (rl/loss_choices.hpp): a key that the chosen estimator, aggregation or
// mode would not read is an error, not silently ignored.
template <class Where>
void check_objective_choices(const Config& c, const Where& where, std::vector<std::string>& errors) {
  const RlConfig d;
  const RlConfig& rl = c.rl;
  auto error = [&](const char* key, const std::string& text) { errors.push_back(fmt::format("{}: {}", where(key), text)); };
  if (rl.advantage_estimator != AdvantageEstimator::grpo && rl.scale_by_std != d.scale_by_std)
    error("rl.scale_by_std", "rl.scale_by_std is read only by rl.advantage_estimator = \"grpo\" (dr_grpo is grpo "
                             "without the division)");
  if (rl.advantage_estimator == AdvantageEstimator::dr_grpo && rl.loss_aggregation != LossAggregation::constant)
    error("rl.advantage_estimator", "rl.advantage_estimator = \"dr_grpo\" normalises the loss by a constant number "
                                    "of tokens: set rl.loss_aggregation = \"constant\" (and rl.loss_tokens, or "
                                    "leave it 0 for rollout.max_new_tokens)");
  if (rl.loss_tokens != d.loss_tokens && rl.loss_aggregation != LossAggregation::constant)
    error("rl.loss_tokens", "rl.loss_tokens is read only by rl.loss_aggregation = \"constant\"");
  if (rl.kl_coef == 0) {
    if (rl.kl_estimator != d.kl_estimator)
      error("rl.kl_estimator", "rl.kl_estimator is read only when rl.kl_coef > 0");
    if (rl.kl_in_reward) error("rl.kl_in_reward", "rl.kl_in_reward is read only when rl.kl_coef > 0");
  }
  if (rl.advantage_estimator == AdvantageEstimator::reinforce_plus_plus && rl.kl_coef > 0 && !rl.kl_in_reward)
    error("rl.advantage_estimator", "rl.advantage_estimator = \"reinforce_plus_plus\" takes the KL in the reward: "
                                    "set rl.kl_in_reward = true");
  if (!rl.dynamic_sampling && rl.max_sampling_rounds != d.max_sampling_rounds)
    error("rl.max_sampling_rounds", "rl.max_sampling_rounds is read only when rl.dynamic_sampling = true");
  if (rl.dynamic_sampling && rl.samples_per_prompt < 2)
    error("rl.dynamic_sampling", "rl.dynamic_sampling keeps groups whose rewards differ, which needs "
                                 "rl.samples_per_prompt >= 2");
  if (rl.overlong != Overlong::soft && rl.overlong_buffer != d.overlong_buffer)
    error("rl.overlong_buffer", "rl.overlong_buffer is read only by rl.overlong = \"soft\"");
  if (rl.overlong == Overlong::soft && (rl.overlong_buffer <= 0 || rl.overlong_buffer > c.rollout.max_new_tokens))
    error("rl.overlong_buffer", fmt::format("rl.overlong = \"soft\" needs 0 < rl.overlong_buffer <= "
                                            "rollout.max_new_tokens = {} (now {})",
                                            c.rollout.max_new_tokens, rl.overlong_buffer));
  if (rl.tis_cap > 0 && rl.old_logp == OldLogp::rollout)
    error("rl.tis_cap", "rl.tis_cap weighs tokens by the training forward's probability over the sampler's, which "
                        "needs rl.old_logp = \"recompute\" (with \"rollout\" the two are the same numbers)");
}

void check_combinations(const BuildInfo& build, LoadedConfig& out) {
  const Config& c = out.config;
  auto where = [&](const std::string& key) { return out.origin.at(key); };
  // A named preset decides the shape: a shape key given beside it would be silently ignored.
  if (c.model.preset != "custom") {
    for (const auto& key : model_shape_keys()) {
      const std::string name = "model." + key;
      if (out.origin.at(name) != "default")
        out.errors.push_back(fmt::format(
            "{}: {} cannot be set with model.preset = \"{}\" (the preset fixes the shape; use "
            "preset = \"custom\" to give the shape keys)",
            where(name), name, c.model.preset));
    }
  }
  // MoE settings other than the defaults on a dense model would be silently ignored. (A
  // resolved config writes every key, defaults included, and must read back.)
  if (c.model.n_experts == 0) {
    const ModelConfig d;
    const std::pair<const char*, bool> changed[] = {
        {"model.top_k", c.model.top_k != d.top_k},
        {"model.d_ff_expert", c.model.d_ff_expert != d.d_ff_expert},
        {"model.moe_every", c.model.moe_every != d.moe_every},
        {"model.shared_expert", c.model.shared_expert != d.shared_expert},
        {"model.aux_loss_coef", c.model.aux_loss_coef != d.aux_loss_coef},
        {"model.moe_impl", c.model.moe_impl != d.moe_impl},
        {"fsdp.expert_parallel", c.fsdp.expert_parallel}};
    for (const auto& [key, differs] : changed)
      if (differs)
        out.errors.push_back(fmt::format("{}: {} applies to mixture-of-experts layers, but model.n_experts = 0",
                                         where(key), key));
  }
  if (c.lora.rank > 0) {
    if (c.lora.targets.empty())
      out.errors.push_back(fmt::format("{}: lora.rank = {} needs at least one of lora.targets", where("lora.targets"),
                                       c.lora.rank));
    // An MoE layer's MLP stays frozen (adapters on experts are not built): on a model whose every
    // layer is MoE, an MLP target would adapt nothing.
    const ModelShape lora_model = resolve_model_shape(c.model);   // a preset's shape too
    if (lora_model.n_experts == 0 &&
        std::find(c.lora.targets.begin(), c.lora.targets.end(), "experts") != c.lora.targets.end())
      out.errors.push_back(fmt::format("{}: lora.targets has \"experts\", which applies to mixture-of-experts "
                                       "models, but model.n_experts = 0",
                                       where("lora.targets")));
    if (lora_model.n_experts > 0 && lora_model.moe_every == 1)
      for (const std::string& t : c.lora.targets)
        if (t == "gate" || t == "up" || t == "down") {
          out.errors.push_back(fmt::format("{}: lora.targets has \"{}\", but every layer of this model is "
                                           "mixture-of-experts, which has no dense MLP: \"experts\" adapts every "
                                           "expert's gate, up and down projections",
                                           where("lora.targets"), t));
          break;
        }
    if (!c.lora.init_from.empty() && c.model.init_from.empty())
      out.errors.push_back(fmt::format("{}: lora.init_from = \"{}\" continues adapters trained over a pretrained base: "
                                       "set model.init_from to that base's directory",
                                       where("lora.init_from"), c.lora.init_from));
  } else {
    // The adapters' settings without adapters would be silently ignored.
    const LoraConfig d;
    const std::pair<const char*, bool> lora_only[] = {{"lora.alpha", c.lora.alpha != d.alpha},
                                                      {"lora.targets", c.lora.targets != d.targets},
                                                      {"lora.init", c.lora.init != d.init},
                                                      {"lora.init_from", c.lora.init_from != d.init_from}};
    for (const auto& [key, differs] : lora_only)
      if (differs) out.errors.push_back(fmt::format("{}: {} applies to lora.rank > 0", where(key), key));
  }
  const ModelShape shape = resolve_model_shape(c.model);
  for (const auto& [key, problem] : shape_problems(shape))
    out.errors.push_back(fmt::format("{}: {}", where(key), problem));
  if (c.train.seq_len > shape.max_seq_len)
    out.errors.push_back(fmt::format("{}: train.seq_len = {} exceeds the model's max_seq_len = {}",
                                     where("train.seq_len"), c.train.seq_len, shape.max_seq_len));
  // A prompt has at least one token: a completion of max_new_tokens needs seq_len >= that many
  // positions after it (in 64 bits: the sum of the two must not wrap).
  if (c.rollout.max_new_tokens > c.train.seq_len)
    out.errors.push_back(fmt::format("{}: rollout.max_new_tokens = {} does not fit train.seq_len = {} (a prompt of one "
                                     "token and the completion need train.seq_len >= rollout.max_new_tokens)",
                                     where("rollout.max_new_tokens"), c.rollout.max_new_tokens, c.train.seq_len));
  if (c.optim.schedule == LrSchedule::cosine && c.optim.decay_steps == 0)
    out.errors.push_back(fmt::format("{}: optim.schedule = \"cosine\" needs optim.decay_steps > 0",
                                     where("optim.schedule")));
  const bool reads_dataset = c.rl.task == "jsonl" || c.rl.task == "text";
  if (reads_dataset && c.rl.dataset.empty())
    out.errors.push_back(fmt::format("{}: rl.task = \"{}\" needs rl.dataset (a JSONL file of examples)",
                                     where("rl.task"), c.rl.task));
  if (!reads_dataset && !c.rl.dataset.empty())
    out.errors.push_back(fmt::format("{}: rl.dataset is read only by rl.task = \"jsonl\" or \"text\", not \"{}\"",
                                     where("rl.dataset"), c.rl.task));
  if (c.rl.task != "text") {
    // The text task's keys: set for another task, they would be ignored.
    const RlConfig d;
    const std::pair<const char*, bool> text_only[] = {
        {"rl.eval_dataset", !c.rl.eval_dataset.empty()}, {"rl.reward", c.rl.reward != d.reward},
        {"rl.system_prompt", !c.rl.system_prompt.empty()}, {"rl.format_reward", c.rl.format_reward != d.format_reward},
        {"rl.reward_pattern", !c.rl.reward_pattern.empty()}, {"rl.reward_command", !c.rl.reward_command.empty()},
        {"rl.eval_interval", c.rl.eval_interval != d.eval_interval}, {"model.tokenizer", !c.model.tokenizer.empty()},
        {"rl.eval_samples", c.rl.eval_samples != d.eval_samples}, {"rl.prompt_key", c.rl.prompt_key != d.prompt_key},
        {"rl.answer_key", c.rl.answer_key != d.answer_key}, {"rl.solution_key", c.rl.solution_key != d.solution_key},
        {"rl.chat_template", c.rl.chat_template != d.chat_template},
        {"rl.template_variables", c.rl.template_variables != d.template_variables},
        {"rl.max_prompt_tokens", c.rl.max_prompt_tokens != d.max_prompt_tokens},
        {"rl.reward_timeout_s", c.rl.reward_timeout_s != d.reward_timeout_s}};
    for (const auto& [key, differs] : text_only)
      if (differs)
        out.errors.push_back(fmt::format("{}: {} applies to rl.task = \"text\", not \"{}\"", where(key), key,
                                         c.rl.task));
  } else {
    if (c.model.tokenizer.empty() && c.model.init_from.empty())
      out.errors.push_back(fmt::format("{}: rl.task = \"text\" needs the model's tokenizer: model.tokenizer or "
                                       "model.init_from (a directory with tokenizer.json)",
                                       where("rl.task")));
    if (c.rl.eval_interval > 0 && c.rl.eval_dataset.empty())
      out.errors.push_back(fmt::format("{}: rl.eval_interval = {} needs rl.eval_dataset", where("rl.eval_interval"),
                                       c.rl.eval_interval));
    // An eval split without an interval would be read and never evaluated.
    if (c.rl.eval_interval == 0 && !c.rl.eval_dataset.empty())
      out.errors.push_back(fmt::format("{}: rl.eval_dataset is evaluated every rl.eval_interval iterations, which is "
                                       "0 (off): set rl.eval_interval",
                                       where("rl.eval_dataset")));
    // A reward command scores every completion itself: the math/regex format reward is not its.
    if (c.rl.reward == "command" && c.rl.format_reward != RlConfig{}.format_reward)
      out.errors.push_back(fmt::format("{}: rl.format_reward applies to rl.reward = \"math\" or \"regex\"; a "
                                       "reward command gives every reward itself",
                                       where("rl.format_reward")));
    if (c.rl.reward == "regex" && c.rl.reward_pattern.empty())
      out.errors.push_back(fmt::format("{}: rl.reward = \"regex\" needs rl.reward_pattern", where("rl.reward")));
    if (c.rl.reward != "regex" && !c.rl.reward_pattern.empty())
      out.errors.push_back(fmt::format("{}: rl.reward_pattern is read only by rl.reward = \"regex\"",
                                       where("rl.reward_pattern")));
    if (c.rl.reward == "command" && c.rl.reward_command.empty())
      out.errors.push_back(fmt::format("{}: rl.reward = \"command\" needs rl.reward_command (the process's argv)",
                                       where("rl.reward")));
    if (c.rl.reward != "command" && !c.rl.reward_command.empty())
      out.errors.push_back(fmt::format("{}: rl.reward_command is read only by rl.reward = \"command\"",
                                       where("rl.reward_command")));
    // A batch that waits longer than that would be ended by the iteration's watchdog (exit 1,
    // "a peer rank failed or is stuck") instead of the reward command's own error.
    if (c.rl.reward == "command" && c.rl.reward_timeout_s >= c.comm.timeout_s)
      out.errors.push_back(fmt::format(
          "{}: rl.reward_timeout_s = {:g} must be shorter than comm.timeout_s = {:g}, which bounds a whole "
          "iteration (raise comm.timeout_s for a slow reward command)",
          where(out.origin.at("rl.reward_timeout_s") != "default" ? "rl.reward_timeout_s" : "comm.timeout_s"),
          c.rl.reward_timeout_s, c.comm.timeout_s));
  }
  // The generated tasks speak the byte tokenizer (rl/tokenizer.hpp): ids 0-255, BOS, EOS and PAD.
  if ((c.rl.task == "sort" || c.rl.task == "add" || c.rl.task == "reverse") &&
      shape.vocab_size < tokenizer::kVocabSize)
    out.errors.push_back(fmt::format("{}: model.vocab_size = {} is too small for rl.task = \"{}\", whose byte "
                                     "tokenizer uses ids up to {} (model.vocab_size >= {})",
                                     where("model.vocab_size"), shape.vocab_size, c.rl.task,
                                     tokenizer::kVocabSize - 1, tokenizer::kVocabSize));
  // Only the range is known here: whether a dataset needs rl.eos_id shows when the jsonl task reads it.
  if (c.rl.eos_id >= shape.vocab_size)
    out.errors.push_back(fmt::format("{}: rl.eos_id = {} is outside the model's vocabulary (model.vocab_size = {})",
                                     where("rl.eos_id"), c.rl.eos_id, shape.vocab_size));
  check_objective_choices(c, where, out.errors);
  if (c.rl.prompts_per_iteration % c.rl.minibatches != 0)
    out.errors.push_back(fmt::format("{}: rl.minibatches = {} does not divide rl.prompts_per_iteration = {}",
                                     where("rl.minibatches"), c.rl.minibatches, c.rl.prompts_per_iteration));
  if (c.comm.backend == CommBackend::nccl && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: comm.backend = \"nccl\" needs a CUDA build, but this shardrl was built for CPU "
        "(use \"auto\" or \"mpi\")",
        where("comm.backend")));
  if (c.comm.gather_engine == GatherEngine::copy && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: comm.gather_engine = \"copy\" runs the all-gathers on the GPUs' copy engines, but this shardrl "
        "was built for CPU (use \"auto\" or \"sm\")",
        where("comm.gather_engine")));
  if (shape.n_experts > 0 && c.train.cuda_graph == TrainGraph::full)
    out.errors.push_back(fmt::format("{}: train.cuda_graph = \"full\" cannot capture mixture-of-experts layers (their "
                                     "routing goes to the host to size the experts' GEMMs; use \"none\")",
                                     where("train.cuda_graph")));
  if (shape.n_experts > 0 && c.rollout.cuda_graph == RolloutGraph::decode)
    out.errors.push_back(fmt::format("{}: rollout.cuda_graph = \"decode\" cannot capture mixture-of-experts layers "
                                     "(their routing goes to the host to size the experts' GEMMs; use \"none\")",
                                     where("rollout.cuda_graph")));
  if (c.train.cuda_graph == TrainGraph::full && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: train.cuda_graph = \"full\" captures CUDA graphs, but this shardrl was built for CPU (use \"none\")",
        where("train.cuda_graph")));
  if (c.rollout.cuda_graph == RolloutGraph::decode && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: rollout.cuda_graph = \"decode\" captures CUDA graphs, but this shardrl was built for CPU (use "
        "\"none\")",
        where("rollout.cuda_graph")));
  if (c.model.attention == AttentionChoice::flash || c.model.attention == AttentionChoice::cudnn) {
    // "auto" picks the fused kernels only where they run; "flash" and "cudnn" insist, so every
    // unmet requirement is named rather than falling back silently. cuDNN takes the training
    // batches set without positions; the RL train phase's rows and prefill keep the flash
    // kernels, so their requirements hold for it as well.
    const bool cudnn = c.model.attention == AttentionChoice::cudnn;
    std::vector<std::string> unmet;
    if (!build.has_cuda) unmet.push_back("a CUDA build, but this shardrl was built for CPU");
    else if (cudnn && !build.has_cudnn)
      unmet.push_back("a GPU build configured with cuDNN 9, but this one has none (CUDNN_ROOT)");
    if (c.model.precision != Precision::bf16) unmet.push_back("model.precision = \"bf16\", not \"fp32\"");
    if (!kernels::flash_attention_supports_head_dim(shape.head_dim))
      unmet.push_back(fmt::format("model.head_dim = 64 or 128, not {}", shape.head_dim));
    if (!unmet.empty())
      out.errors.push_back(fmt::format(
          "{}: model.attention = \"{}\" runs {}, which need{} {} (use {})", where("model.attention"),
          cudnn ? "cudnn" : "flash", cudnn ? "cuDNN's fused attention" : "the tensor-core kernels", cudnn ? "s" : "",
          fmt::join(unmet, "; and "), cudnn ? "\"auto\", \"flash\" or \"gemm\"" : "\"auto\" or \"gemm\""));
  }
  if (c.comm.backend == CommBackend::mpi && build.has_cuda && !build.any)
    out.errors.push_back(fmt::format(
        "{}: comm.backend = \"mpi\" moves host buffers, but this CUDA build keeps tensors on the "
        "GPU (use \"auto\" or \"nccl\")",
        where("comm.backend")));
  if (c.rollout.expert_parallel && (shape.n_experts == 0 || !c.fsdp.expert_parallel))
    out.errors.push_back(fmt::format("{}: rollout.expert_parallel decodes with the experts fsdp.expert_parallel "
                                     "spreads over the ranks; it needs {}",
                                     where("rollout.expert_parallel"),
                                     shape.n_experts == 0 ? "a mixture-of-experts model (model.n_experts > 0)"
                                                          : "fsdp.expert_parallel = true"));
  if (const std::int64_t T = c.rollout.tensor_parallel; T > 1) {
    if (shape.n_experts > 0)
      out.errors.push_back(fmt::format("{}: rollout.tensor_parallel = {} splits the layers of dense models; a mixture "
                                       "of experts (model.n_experts = {}) decodes with its experts spread by "
                                       "rollout.expert_parallel (use 1)",
                                       where("rollout.tensor_parallel"), T, shape.n_experts));
    const std::pair<const char*, int> split[] = {
        {"n_heads", shape.n_heads}, {"n_kv_heads", shape.n_kv_heads}, {"d_ff", shape.d_ff}};
    for (const auto& [key, value] : split)
      if (shape.n_experts == 0 && value % T != 0)
        out.errors.push_back(fmt::format("{}: rollout.tensor_parallel = {} gives each rank 1/{} of model.{}, which is "
                                         "{}",
                                         where("rollout.tensor_parallel"), T, T, key, value));
  }
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

LoadedConfig load_config(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides, const BuildInfo& build) {
  LoadedConfig out;
  for (const auto& d : config_schema()) out.origin[d.full_name()] = "default";
  parse_toml(toml_text, source_name, out);
  for (const auto& arg : overrides) apply_override(arg, out);
  if (out.errors.empty()) check_combinations(build, out);
  return out;
}

std::vector<std::string> check_for_job(const LoadedConfig& loaded, int world_size) {
  std::vector<std::string> errors;
  const Config& c = loaded.config;
  if (c.debug.fail_rank >= world_size)
    errors.push_back(fmt::format("{}: debug.fail_rank = {} but the job has {} rank{} (0..{})",
                                 loaded.origin.at("debug.fail_rank"), c.debug.fail_rank,
                                 world_size, world_size == 1 ? "" : "s", world_size - 1));
  if (world_size % c.rollout.tensor_parallel != 0)
    errors.push_back(fmt::format("{}: rollout.tensor_parallel = {} does not divide the job's {} rank{}",
                                 loaded.origin.at("rollout.tensor_parallel"), c.rollout.tensor_parallel, world_size,
                                 world_size == 1 ? "" : "s"));
  if (c.fsdp.expert_parallel && c.model.n_experts > 0 && c.model.n_experts % world_size != 0)
    errors.push_back(fmt::format("{}: fsdp.expert_parallel gives each rank n_experts / ranks experts, but "
                                 "model.n_experts = {} does not divide among {} ranks",
                                 loaded.origin.at("fsdp.expert_parallel"), c.model.n_experts, world_size));
  return errors;
}

DerivedConfig derive(const Config& config, const BuildInfo& build) {
  DerivedConfig d;
  d.run_dir = std::filesystem::path(config.run.dir) / config.run.name;
  d.comm_backend = config.comm.backend;
  if (d.comm_backend == CommBackend::automatic)
    d.comm_backend = build.has_cuda ? CommBackend::nccl : CommBackend::mpi;
  return d;
}

}  // namespace shardrl
