// TOML and --set parsing and whole-config validation. Every key's own problems are collected,
// none stops the scan, so a user fixes them in one round; the checks across keys
// (combinations.cpp) follow once every key reads.
#include "config/load.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "config/combinations.hpp"
#include "config/schema.hpp"

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

// "(did you mean 'run.seed'?)" for a key that is misspelt or sits in the wrong section; every
// section that has it ("rl.top_k": model.top_k, the experts', or rollout.top_k, the draw's).
std::string key_suggestion(const std::string& section, const std::string& key) {
  std::vector<std::string> owners;
  for (const auto& d : config_schema())
    if (d.key == key) owners.push_back("'" + d.full_name() + "'");
  if (owners.size() == 1) return fmt::format(" (did you mean {}?)", owners[0]);
  if (!owners.empty()) return fmt::format(" (did you mean one of {}?)", fmt::join(owners, ", "));
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
    if (def.max && (x > *def.max || (def.max_exclusive && x == *def.max)))
      return fmt::format("must be {} {}, got {}", def.max_exclusive ? "<" : "<=",
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
  // Text that is not UTF-8 (a Latin-1 path given by --set) would be written into config.toml and
  // each checkpoint as it is, where TOML refuses it: the saved config could not be read back.
  // TOML's own reader is the judge, as for the file.
  const auto reads_back = [](const std::string& text) {
    try {
      return toml::parse("v = " + to_toml_literal(ConfigValue(text)))["v"].as_string() != nullptr;
    } catch (const toml::parse_error&) {
      return false;
    }
  };
  if ((def.kind == ValueKind::string || def.kind == ValueKind::choice) && !reads_back(std::get<std::string>(v)))
    return "is not valid UTF-8 text, which the saved config.toml must hold";
  if (def.kind == ValueKind::string_list)
    for (const std::string& item : std::get<std::vector<std::string>>(v))
      if (!reads_back(item)) return "holds text that is not valid UTF-8, which the saved config.toml must hold";
  // A NUL ends a path, an argument or a C string where the value goes: "d.jsonl\u0000x" read as
  // d.jsonl, silently.
  const auto has_nul = [](const std::string& text) { return text.find('\0') != std::string::npos; };
  if ((def.kind == ValueKind::string && has_nul(std::get<std::string>(v))) ||
      (def.kind == ValueKind::string_list &&
       std::any_of(std::get<std::vector<std::string>>(v).begin(), std::get<std::vector<std::string>>(v).end(), has_nul)))
    return "holds a NUL character (\\u0000), which would cut it short";
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
      if (ec == std::errc::result_out_of_range && end == text.data() + text.size()) {
        problem = fmt::format("{} is out of range (a 64-bit integer)", text);
        return std::nullopt;
      }
      // What a TOML file takes as an integer, the command line takes too: +5, 1_000, 0x10.
      try {
        auto t = toml::parse("v = " + text);
        if (auto i = t["v"].as_integer(); i && t.size() == 1) return ConfigValue(static_cast<std::int64_t>(i->get()));
      } catch (const toml::parse_error&) {
      }
      break;
    }
    case ValueKind::real: {
      // A decimal number as TOML writes one: strtod alone also takes leading blanks and hex
      // ("0x10" read as 16), which the file's TOML and the integer keys refuse.
      const bool decimal = !text.empty() && text.find_first_of(" \t\n\r\f\vxXpP") == std::string::npos;
      char* end = nullptr;
      errno = 0;
      double x = std::strtod(text.c_str(), &end);
      if (decimal && end == text.c_str() + text.size()) {
        // 1e-400 read as 0 would turn rl.kl_coef off silently; 1e400 as inf.
        if (errno == ERANGE) {
          problem = fmt::format("{} is beyond a double's range", text);
          return std::nullopt;
        }
        return ConfigValue(x);
      }
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
    if (std::find(sections.begin(), sections.end(), section) == sections.end() && !section_node.is_table() &&
        !section_node.is_array_of_tables()) {
      // `seed = 3` at the top: a key outside any section. Name the sections that have it.
      std::vector<std::string> owners;
      for (const auto& d : config_schema())
        if (d.key == section) owners.push_back(d.full_name());
      std::string hint;
      if (owners.size() == 1)
        hint = fmt::format(" (did you mean {}? put it under [{}])", owners[0], owners[0].substr(0, owners[0].find('.')));
      else if (!owners.empty())
        hint = fmt::format(" (a key of {})", fmt::join(owners, ", "));
      report(section_node, fmt::format("{}: '{}' is outside any section; every key belongs to one{}", where, section, hint));
      continue;
    }
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
    else if (eq == std::string::npos && find_key(name.substr(0, dot), name.substr(dot + 1)))
      hint = fmt::format(" (no value after {}: --set {}=VALUE)", name, name);
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

std::vector<std::string> check_for_job(const LoadedConfig& loaded, int world_size, bool trains) {
  std::vector<std::string> errors;
  const Config& c = loaded.config;
  const auto where = [&](const char* key) { return loaded.origin.at(key); };
  if (trains && c.rollout.temperature == 0) {
    // Greedy rollouts draw a prompt's samples alike: compared with each other, every advantage is 0.
    if (c.rl.advantage_estimator != AdvantageEstimator::reinforce_plus_plus && c.rl.samples_per_prompt > 1)
      errors.push_back(fmt::format(
          "{}: rollout.temperature = 0 draws each prompt's samples alike (greedy), and rl.advantage_estimator = "
          "\"grpo\", \"dr_grpo\" and \"rloo\" compare them with each other, so every advantage would be 0 and "
          "nothing trained (sample at a temperature > 0, or use \"reinforce_plus_plus\", which whitens over the "
          "batch)",
          where("rollout.temperature")));
    // (generate's --temperature 0 over a config that samples with them is a greedy look, not a job.)
    for (const auto& [key, set] : {std::pair{"rollout.top_k", c.rollout.top_k != RolloutConfig{}.top_k},
                                   std::pair{"rollout.top_p", c.rollout.top_p != RolloutConfig{}.top_p}})
      if (set)
        errors.push_back(fmt::format("{}: {} is not read with rollout.temperature = 0 (greedy decoding)", where(key), key));
  }
  if (c.debug.fail_rank >= world_size)
    errors.push_back(fmt::format("{}: debug.fail_rank = {} but the job has {} rank{} (0..{})",
                                 loaded.origin.at("debug.fail_rank"), c.debug.fail_rank,
                                 world_size, world_size == 1 ? "" : "s", world_size - 1));
  if (trains && world_size % c.rollout.tensor_parallel != 0)
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
