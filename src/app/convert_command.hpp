// `shardrl convert --from CKPT.h5 --to-safetensors DIR [--dtype bf16|fp32]`: a checkpoint's
// policy weights (/model) as a Hugging Face model directory: model.safetensors with the
// parameters under their Hugging Face names (shardrl's own), and config.json. The model shape
// comes from the checkpoint's resolved config. One process. A LoRA run's checkpoint exports with
// --merged (its base with the adapters folded in), or as its adapters alone with --to-peft DIR
// (PEFT's adapter_model.safetensors and adapter_config.json).
// `shardrl convert --from-safetensors DIR --to CKPT.h5`: the reverse, as a job's checkpoint at
// iteration 0 (fresh optimizer state), on any number of ranks.
#pragma once

#include "app/cli.hpp"

namespace shardrl {

int run_convert(const ConvertArgs& args);

}  // namespace shardrl
