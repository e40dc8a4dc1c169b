// CPU builds: the tensor-core attention does not exist; the model takes the batched-GEMM path
// (model.attention resolves to "gemm", and "flash" is refused when the config is checked).
#include "core/error.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl::kernels {

bool flash_attention_available() { return false; }

void flash_attention_forward(void*, const AttentionShape&, const std::int32_t*, const bf16*, const bf16*,
                             const bf16*, bf16*, float*) {
  SHARDRL_FATAL("flash attention needs a GPU build (SHARDRL_ENABLE_CUDA)");
}

void flash_attention_backward(void*, const AttentionShape&, const std::int32_t*, const bf16*, const bf16*,
                              const bf16*, const bf16*, const float*, const bf16*, bf16*, bf16*, bf16*, float*) {
  SHARDRL_FATAL("flash attention needs a GPU build (SHARDRL_ENABLE_CUDA)");
}

}  // namespace shardrl::kernels
