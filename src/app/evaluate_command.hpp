// `shardrl evaluate`: one evaluation of the text task's held-out split, as a training job runs it
// every rl.eval_interval iterations (GrpoLoop::evaluate: the same prompts, rendering, sampling,
// reward and draws, a function of the seed and the prompt alone, at any world size), of a
// checkpoint's policy (--checkpoint, with its run's config unless --config is given) or of the
// config's model (model.init_from's weights: a base before any training). Rank 0 prints the
// evaluation's line and, with --out, writes its numbers as a JSON object. The config is checked
// as a training job's (the loop that evaluates is the one that trains), so its world size must be
// one the job could train on; the policy is only sampled (no optimizer state), and the training
// split (rl.dataset) is not read.
#pragma once

#include <string>
#include <vector>

namespace shardrl {

struct EvaluateArgs {
  std::string config_path;              // the config; without it, the checkpoint's own
  std::string checkpoint;               // weights from this checkpoint (else the config's model)
  std::vector<std::string> overrides;   // --set, as section.key=value
  std::string base;                     // a LoRA checkpoint's base where it is now
  std::string dataset;                  // the split to evaluate instead of rl.eval_dataset
  std::string out;                      // a JSON file for the numbers ("": none)
};

int run_evaluate(const EvaluateArgs& args);

}  // namespace shardrl
