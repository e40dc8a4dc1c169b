// Builds without cuDNN: its attention does not exist (model.attention = "cudnn" is refused when
// the config is checked; a model built directly falls back to the flash kernels).
#include "core/error.hpp"
#include "kernels/cudnn_attention.hpp"

namespace shardrl::kernels {

struct CudnnAttention::Plans {
  std::string why = "this shardrl was built without cuDNN (configure a GPU build with CUDNN_ROOT)";
};

bool cudnn_attention_available() { return false; }
bool cudnn_attention_supports(const AttentionShape&) { return false; }

CudnnAttention::CudnnAttention() : plans_(std::make_unique<Plans>()) {}
CudnnAttention::~CudnnAttention() = default;
const std::string& CudnnAttention::why() const { return plans_->why; }

bool CudnnAttention::prepare(const AttentionShape&, bool, std::size_t) { return false; }
std::size_t CudnnAttention::workspace_bytes(const AttentionShape&) const { return 0; }

void CudnnAttention::forward(void*, const AttentionShape&, const bf16*, const bf16*, const bf16*, bf16*, float*,
                             void*) {
  SHARDRL_FATAL("cuDNN attention needs a GPU build with cuDNN");
}

void CudnnAttention::backward(void*, const AttentionShape&, const bf16*, const bf16*, const bf16*, const bf16*,
                              const float*, const bf16*, bf16*, bf16*, bf16*, float*, void*) {
  SHARDRL_FATAL("cuDNN attention needs a GPU build with cuDNN");
}

}  // namespace shardrl::kernels
