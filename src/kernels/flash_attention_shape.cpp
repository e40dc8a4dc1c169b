// What the tensor-core attention takes, in plain C++ (both builds): the launchers in
// flash_attention.cu and the model's choice of implementation read the same rules.
#include "kernels/flash_attention.hpp"

namespace shardrl::kernels {

bool flash_attention_supports_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

std::size_t flash_attention_backward_workspace_bytes(const AttentionShape& s) {
  return static_cast<std::size_t>(s.B) * s.S * s.n_heads * sizeof(float);
}

}  // namespace shardrl::kernels
