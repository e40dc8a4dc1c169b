// Causal grouped-query attention through cuDNN's fused flash attention (its graph API: the
// scaled-dot-product pattern of matmuls, pointwise and reduction operations that cuDNN's
// runtime-fusion engines compile into one kernel forward and one backward; on Hopper they use
// wgmma and TMA, which kernels/flash_attention.cu does not). GPU builds with cuDNN 9 found by
// CMake (CUDNN_ROOT); the others have cudnn_attention_available() == false.
//
// Scope: rows that each hold one right-padded sequence (positions 0..S-1): the model gives it
// the training batches set without positions. Batches with positions (packed rows, whose masks
// come from them) stay with the flash kernels (model/attention.cpp picks). Same q, k, v, out layouts as
// kernels/flash_attention.hpp; the softmax statistics (lse) are cuDNN's own: (B, n_heads, S)
// natural-log sums of the scaled scores, read back only by this backward.
//
// Deterministic: backward is built in the form whose engines write dQ without atomics (the
// cuDNN frontend's "deterministic" SDPA backward on Hopper), and any engine cuDNN marks
// non-deterministic is refused, so resumed and graph-captured steps stay bit-identical.
//
// Plain C++ header (no cuDNN or CUDA types), like flash_attention.hpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/attention_shape.hpp"

namespace shardrl {
struct bf16;
}

namespace shardrl::kernels {

// True when this build links cuDNN (a GPU build configured with it).
bool cudnn_attention_available();

// True when the fused engines take this shape: head_dim a multiple of 8 up to 128.
bool cudnn_attention_supports(const AttentionShape& s);

// The backward workspace of one row, n_heads x S x 2 S bytes (the score gradients) and, with
// grouped heads, n_heads x S x 4 hd more (each query head's dK and dV before the group sums):
// what the plans of cuDNN 9.14 ask for on Hopper (272 MiB for 32 heads of 64 over 8 kv heads at
// S = 2048, 16.1 GiB at S = 16384), for the memory plan; the model allocates what the built plans
// report.
double cudnn_attention_workspace_per_row(const AttentionShape& s);

// One model's cuDNN attention: the handle, and the compiled forward and backward plans per
// shape (built once per shape, by prepare; never inside a captured graph: a step runs eagerly
// before it is captured).
//
// Memory: the deterministic backward keeps the S x S score gradients (bf16) of every query head
// of the rows it takes at once: cudnn_attention_workspace_per_row bytes per row
// (272 MiB for llama-1b at S = 2048, measured on cuDNN 9.14), so a call takes only as many of the
// batch's rows as fit a workspace budget, in calls of that many rows (a multiple of 4 where
// n_heads x S is not, so that every call's statistics start 16-byte aligned). Where one row does
// not fit (long context: 69 GB a row for llama-1b at S = 32768), a call takes one row and as
// many kv heads, each with its query heads, as fit (a divisor of n_kv_heads: the workspace is
// per query head, so 8.6 GB a call for llama-1b's groups of 4 at S = 32768). A shape that cannot
// be split so is refused (the caller keeps the flash kernels, whose memory is linear in S).
class CudnnAttention {
 public:
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds this shape's plans (forward, and backward when `training`) within
  // `workspace_budget` bytes if not built yet. False when cuDNN has no deterministic engine for
  // them or a call of one row and one kv head exceeds the budget (why() says which).
  bool prepare(const AttentionShape& s, bool training, std::size_t workspace_budget);
  // The device workspace a prepared shape needs (at most the budget it was prepared with).
  std::size_t workspace_bytes(const AttentionShape& s) const;
  const std::string& why() const;

  // out (B*S, n_heads, hd); lse (B, n_heads, S) fp32. After a successful prepare(s, ...);
  // `workspace` holds its workspace_bytes.
  void forward(void* stream, const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* out,
               float* lse, void* workspace);

  // dq, dk, dv written. `delta` (B, n_heads, S) fp32 scratch: rowsum(dout * out).
  void backward(void* stream, const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v,
                const bf16* out, const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, float* delta,
                void* workspace);

  // Forward and backward calls run (each may be several cuDNN executions): which path a
  // model's attention took, for tests.
  long forward_calls() const { return forward_calls_; }
  long backward_calls() const { return backward_calls_; }

  struct Plans;

 private:
  long forward_calls_ = 0, backward_calls_ = 0;
  std::unique_ptr<Plans> plans_;
};

}  // namespace shardrl::kernels
