// What the tensor-core attention takes, in plain C++ (both builds): the launchers in
// flash_attention.cu and the model's choice of implementation read the same rules; and the
// size of cuDNN's attention workspace, which the memory plan reads on every build.
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl::kernels {

bool flash_attention_supports_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

double cudnn_attention_workspace_per_row(const AttentionShape& s) {
  const bool grouped = s.n_heads != s.n_kv_heads;   // per-query-head dK and dV (bf16) before the group sums
  return double(s.n_heads) * s.S * (2.0 * s.S + (grouped ? 4.0 * s.hd : 0.0));
}

std::size_t flash_attention_backward_workspace_bytes(const AttentionShape& s) {
  return static_cast<std::size_t>(s.B) * s.S * s.n_heads * sizeof(float);
}

}  // namespace shardrl::kernels
