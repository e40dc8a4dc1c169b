// The config of a benchmark run: a TOML file (or none: all defaults) plus --set overrides,
// loaded and validated exactly as a job's. Prints the problems and returns false if invalid.
#pragma once

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "config/load.hpp"
#include "job/options.hpp"

namespace shardrl {

inline bool load_bench_config(const char* program, const std::string& path, const std::vector<std::string>& overrides,
                              Config& out) {
  std::string text;
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) {
      std::cerr << program << ": cannot read config file '" << path << "'\n";
      return false;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  LoadedConfig loaded = load_config(text, path.empty() ? "(defaults)" : path, overrides, this_build());
  for (const auto& e : loaded.errors) std::cerr << program << ": " << e << "\n";
  out = loaded.config;
  return loaded.ok();
}

// The --config and --set options every benchmark takes, and their loading.
struct BenchConfigArgs {
  std::string path;
  std::vector<std::string> overrides;

  void add_to(CLI::App& app) {
    app.add_option("--config", path, "TOML configuration (default: all defaults)");
    app.add_option("--set", overrides, "Override one key (repeatable)");
  }
  bool load(const char* program, Config& out) const { return load_bench_config(program, path, overrides, out); }
};

}  // namespace shardrl
