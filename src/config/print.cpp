#include "config/print.hpp"

#include <fmt/format.h>

#include "config/schema.hpp"

namespace shardrl {

std::string format_config_table(const LoadedConfig& loaded) {
  std::size_t key_w = 0, val_w = 0;
  for (const auto& d : config_schema()) {
    key_w = std::max(key_w, d.full_name().size());
    val_w = std::max(val_w, to_toml_literal(d.get(loaded.config)).size());
  }
  std::string out = "resolved configuration:\n";
  for (const auto& d : config_schema()) {
    out += fmt::format("  {:<{}}  {:<{}}  ({})\n", d.full_name(), key_w,
                       to_toml_literal(d.get(loaded.config)), val_w,
                       loaded.origin.at(d.full_name()));
  }
  return out;
}

std::string to_toml(const Config& config) {
  std::string out = "# Resolved shardrl configuration (every key, defaults included).\n";
  std::string section;
  for (const auto& d : config_schema()) {
    if (d.section != section) {
      section = d.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("{} = {}\n", d.key, to_toml_literal(d.get(config)));
  }
  return out;
}

}  // namespace shardrl
