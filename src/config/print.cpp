#include "config/print.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "config/model_presets.hpp"

#include "config/schema.hpp"

namespace shardrl {

namespace {

bool is_shape_key(const KeyDef& d) {
  const auto& keys = model_shape_keys();
  return d.section == "model" && std::find(keys.begin(), keys.end(), d.key) != keys.end();
}

}  // namespace

std::string format_config_table(const LoadedConfig& loaded) {
  Config shown = loaded.config;
  shown.model = with_resolved_shape(loaded.config.model);
  const bool named_preset = loaded.config.model.preset != "custom";
  std::size_t key_w = 0, val_w = 0;
  for (const auto& d : config_schema()) {
    key_w = std::max(key_w, d.full_name().size());
    val_w = std::max(val_w, to_toml_literal(d.get(shown)).size());
  }
  std::string out = "resolved configuration:\n";
  for (const auto& d : config_schema()) {
    std::string origin = named_preset && is_shape_key(d)
                             ? "preset \"" + loaded.config.model.preset + "\""
                             : loaded.origin.at(d.full_name());
    out += fmt::format("  {:<{}}  {:<{}}  ({})\n", d.full_name(), key_w, to_toml_literal(d.get(shown)), val_w,
                       origin);
  }
  return out;
}

std::string to_toml(const Config& config) {
  Config shown = config;
  shown.model = with_resolved_shape(config.model);
  const bool named_preset = config.model.preset != "custom";
  std::string out = "# Resolved shardrl configuration (every key, defaults included).\n";
  std::string section;
  for (const auto& d : config_schema()) {
    if (d.section != section) {
      section = d.section;
      out += fmt::format("\n[{}]\n", section);
    }
    // A named preset fixes the shape: its keys are shown for reference, as comments, so the
    // file stays a valid config that resolves to the same shape.
    if (named_preset && is_shape_key(d))
      out += fmt::format("# {} = {}   (from preset \"{}\")\n", d.key, to_toml_literal(d.get(shown)),
                         config.model.preset);
    else
      out += fmt::format("{} = {}\n", d.key, to_toml_literal(d.get(config)));
  }
  return out;
}

}  // namespace shardrl
