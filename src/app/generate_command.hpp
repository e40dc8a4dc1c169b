// `shardrl generate`: completions of one prompt from the model, one per line on stdout. Until
// checkpoints exist the model is a fresh one from the config's seed.
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct GenerateArgs {
  std::string config_path;
  std::vector<std::string> overrides;   // --set and the sampling flags, as section.key=value
  std::string prompt;
  int samples = 1;
};

int run_generate(const GenerateArgs& args);

}  // namespace shardrl
