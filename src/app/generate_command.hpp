// `shardrl generate`: completions of one prompt, one per line on stdout, from a checkpoint's
// policy (--checkpoint: its weights, and its resolved config unless --config is given) or from
// a fresh model built from the config's seed.
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct GenerateArgs {
  std::string config_path;              // the config; without it, the checkpoint's own
  std::string checkpoint;               // weights from this checkpoint (else a fresh model)
  std::vector<std::string> overrides;   // --set and the sampling flags, as section.key=value
  std::string prompt;
  int samples = 1;
};

int run_generate(const GenerateArgs& args);

}  // namespace shardrl
