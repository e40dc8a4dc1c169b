// `shardrl generate`: completions of one prompt, one per line on stdout, from a checkpoint's
// policy (--checkpoint: its weights, and its resolved config unless --config is given) or from
// a fresh model built from the config's seed. --prompt is text: encoded with the model's own
// tokenizer when the job has one (model.tokenizer, or a tokenizer.json in model.init_from; with
// --chat rendered first as a user message with its chat template), else BOS and its bytes for
// the byte tokenizer; completions are printed as text. --prompt-ids "1 2 3" gives token ids,
// used verbatim, and completions are printed as ids. Completions end at rl.eos_id, else the
// model's tokenizer's eos token, else the byte tokenizer's EOS.
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct GenerateArgs {
  std::string config_path;              // the config; without it, the checkpoint's own
  std::string checkpoint;               // weights from this checkpoint (else a fresh model)
  std::vector<std::string> overrides;   // --set and the sampling flags, as section.key=value
  std::string base;                     // a LoRA checkpoint's base where it is now (else its run's model.init_from)
  std::string prompt;      // text (may be empty: a byte-tokenizer model's prompt is then [BOS]), or
  bool prompt_given = false;
  std::string prompt_ids;  // token ids separated by spaces or commas, or
  std::string task_input;  // the input of the job's task, rendered as its prompt (rl/task_prompt.hpp)
                           // (exactly one of the three)
  int samples = 1;
  bool chat = false;       // --prompt is one user message, rendered with the model's chat template
};

int run_generate(const GenerateArgs& args);

}  // namespace shardrl
