// The shardrl command line: `shardrl train --config F [--set k=v ...]`, --help, --version.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardrl {

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;   // "section.key=value"
  bool log_all_ranks = false;
  bool profile = false;   // per-step breakdown (fences between phases)
};

// Runs the command line; returns the process exit code (see core/error.hpp).
int run_cli(int argc, char** argv);

}  // namespace shardrl
