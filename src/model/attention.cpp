#include "model/attention.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl {
namespace {

// The flash kernels launch on the execution space's own stream, so they stay ordered with the
// Kokkos kernels and GEMMs around them (and inside a captured step graph).
void* stream_of([[maybe_unused]] const ExecSpace& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  return space.cuda_stream();
#else
  return nullptr;   // never reached: CPU builds resolve every model to gemm
#endif
}

// cuDNN for this batch: it was set without explicit positions, so each row holds one sequence
// from position 0 (cuDNN's mask is the plain causal one), and cuDNN has plans for the shape that
// fit the workspace allocated for the largest. Forward and backward of a
// batch ask with the same shape and scratch, so both get the same answer (backward's plan is
// built with forward's in a training model).
bool cudnn_runs(const kernels::AttentionShape& shape, const AttentionScratch& scratch) {
  return scratch.cudnn && scratch.single_sequence_rows &&
         scratch.cudnn->prepare(shape, scratch.delta != nullptr, scratch.cudnn_workspace_bytes);
}

}  // namespace

template <class T>
void attention_forward(AttentionImpl impl, const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& shape,
                       const std::int32_t* positions, const T* q, const T* k, const T* v, T* out, float* lse,
                       const AttentionScratch& scratch) {
  if (impl == AttentionImpl::gemm)
    return gemm_attention_forward(space, gemm, shape, positions, q, k, v, out, lse, scratch.gemm);
  if constexpr (std::is_same_v<T, bf16>) {
    if (impl == AttentionImpl::cudnn && cudnn_runs(shape, scratch))
      return scratch.cudnn->forward(stream_of(space), shape, q, k, v, out, lse, scratch.cudnn_workspace);
    kernels::flash_attention_forward(stream_of(space), shape, positions, q, k, v, out, lse);
  } else {
    SHARDRL_FATAL("flash attention takes bf16 only (model.precision = \"fp32\" needs model.attention = \"gemm\")");
  }
}

template <class T>
void attention_backward(AttentionImpl impl, const ExecSpace& space, Gemm& gemm, const kernels::AttentionShape& shape,
                        const std::int32_t* positions, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const T* dout, T* dq, T* dk, T* dv, const AttentionScratch& scratch) {
  if (impl == AttentionImpl::gemm)
    return gemm_attention_backward(space, gemm, shape, positions, q, k, v, out, lse, dout, dq, dk, dv, scratch.gemm);
  if constexpr (std::is_same_v<T, bf16>) {
    SHARDRL_CHECK(scratch.delta != nullptr, "flash attention backward without its scratch (an inference-only model?)");
    if (impl == AttentionImpl::cudnn && cudnn_runs(shape, scratch))
      return scratch.cudnn->backward(stream_of(space), shape, q, k, v, out, lse, dout, dq, dk, dv, scratch.delta,
                                     scratch.cudnn_workspace);
    kernels::flash_attention_backward(stream_of(space), shape, positions, q, k, v, out, lse, dout, dq, dk, dv,
                                      scratch.delta);
  } else {
    SHARDRL_FATAL("flash attention takes bf16 only (model.precision = \"fp32\" needs model.attention = \"gemm\")");
  }
}

template void attention_forward<float>(AttentionImpl, const ExecSpace&, Gemm&, const kernels::AttentionShape&,
                                       const std::int32_t*, const float*, const float*, const float*, float*, float*,
                                       const AttentionScratch&);
template void attention_forward<bf16>(AttentionImpl, const ExecSpace&, Gemm&, const kernels::AttentionShape&,
                                      const std::int32_t*, const bf16*, const bf16*, const bf16*, bf16*, float*,
                                      const AttentionScratch&);
template void attention_backward<float>(AttentionImpl, const ExecSpace&, Gemm&, const kernels::AttentionShape&,
                                        const std::int32_t*, const float*, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*, const AttentionScratch&);
template void attention_backward<bf16>(AttentionImpl, const ExecSpace&, Gemm&, const kernels::AttentionShape&,
                                       const std::int32_t*, const bf16*, const bf16*, const bf16*, const bf16*,
                                       const float*, const bf16*, bf16*, bf16*, bf16*, const AttentionScratch&);

}  // namespace shardrl
