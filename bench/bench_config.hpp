// The config of a benchmark run: a TOML file (or none: all defaults) plus --set overrides,
// loaded and validated exactly as a job's. Prints the problems and returns false if invalid.
#pragma once

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "config/load.hpp"

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

}  // namespace shardrl
