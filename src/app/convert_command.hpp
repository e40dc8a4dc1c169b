// `shardrl convert --from CKPT.h5 --to-safetensors DIR [--dtype bf16|fp32]`: a checkpoint's
// policy weights (/model) as a Hugging Face model directory: model.safetensors with the
// parameters under their Hugging Face names (shardrl's own), and config.json. The model shape
// comes from the checkpoint's resolved config.
#pragma once

#include "app/cli.hpp"

namespace shardrl {

int run_convert(const ConvertArgs& args);

}  // namespace shardrl
