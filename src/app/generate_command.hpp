// `shardrl generate`: completions of one prompt, one per line on stdout, from a checkpoint's
// policy (--checkpoint: its weights, and its resolved config unless --config is given) or from
// a fresh model built from the config's seed. The prompt is text for the byte tokenizer
// (--prompt: BOS and its bytes; completions printed as text), or token ids for a model with its
// own tokenizer (--prompt-ids "1 2 3", used verbatim; completions printed as ids). Completions
// end at rl.eos_id (the byte tokenizer's EOS when unset).
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct GenerateArgs {
  std::string config_path;              // the config; without it, the checkpoint's own
  std::string checkpoint;               // weights from this checkpoint (else a fresh model)
  std::vector<std::string> overrides;   // --set and the sampling flags, as section.key=value
  std::string prompt;      // text, or
  std::string prompt_ids;  // token ids separated by spaces or commas (exactly one of the two)
  int samples = 1;
};

int run_generate(const GenerateArgs& args);

}  // namespace shardrl
