#include "model/tensor_parallel.hpp"

#include "core/error.hpp"

namespace shardrl {

ModelShape tensor_parallel_shape(const ModelShape& full, int ranks) {
  SHARDRL_CHECK(ranks >= 1 && full.n_experts == 0 && full.n_heads % ranks == 0 && full.n_kv_heads % ranks == 0 &&
                    full.d_ff % ranks == 0,
                "tensor_parallel_shape: the ranks divide the heads, the kv heads and d_ff of a dense model (the "
                "config checks it)");
  ModelShape part = full;
  part.n_heads /= ranks;
  part.n_kv_heads /= ranks;
  part.d_ff /= ranks;
  part.lora = LoraShape{};   // a part decodes folded weights
  return part;
}

}  // namespace shardrl
