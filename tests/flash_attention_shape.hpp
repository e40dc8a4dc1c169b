// A custom model shape whose head dim the tensor-core attention takes (kernels/flash_attention.hpp),
// for the tests that run jobs with it on GPU builds (attention as the config's "auto" or "flash"
// resolves it there; CPU builds take the GEMM path with the same shape).
#pragma once

#include "config/config.hpp"

namespace shardrl {

inline void use_flash_attention_shape(Config& c) {
  c.model.preset = "custom";
  c.model.n_heads = 2;
  c.model.n_kv_heads = 1;
  c.model.head_dim = 64;
}

}  // namespace shardrl
