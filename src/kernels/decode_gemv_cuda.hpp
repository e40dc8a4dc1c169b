// The linear layers of a decode step on the GPU: y = x W^T for the step's few rows, reading
// each weight once.
//
// Why a CUDA-only kernel: a decode step of a few rows is a chain of matrix-vector products
// bound by reading the weights, and cuBLAS's kernels for them are tiled for many rows (64 x 8
// tiles, split-k with a separate reduction): at batch 1 its GEMMs took 1.4 ms of a 2.5 ms
// qwen3-0.6b step (225 launches) where the weights alone take 0.36 ms at the copy bandwidth.
// Here each warp streams a few rows of W in 16-byte loads (several in flight per lane) against
// every row of x, and products that share x (q, k, v; gate and up) run in one launch; the gate
// and up products end in the SwiGLU activation, so g and u never reach memory.
//
// The result: each output to bf16 after an fp32 sum in a fixed order (deterministic, so decode
// graphs and eager steps draw the same tokens), plus `add` in fp32 before that one rounding.
// The SwiGLU form rounds g and u to bf16 before the activation, as kernels::swiglu_forward does
// with the GEMMs' bf16 outputs.
//
// Plain C++ (no Kokkos, no CUDA types): the kernels live in decode_gemv.cu; kernels::decode_gemv
// (decode_gemv.hpp) takes them on GPU builds.
#pragma once

namespace shardrl {
struct bf16;   // core/bf16.hpp; only pointers here
}

namespace shardrl::kernels {

// The most rows these kernels take; past it the step goes to cuBLAS. Measured on an H100
// (bench_decode, decode graphs, 2026-11-26): faster than cuBLAS at 1, 2 and 4 rows (llama-1b
// 1.25x, 1.20x, 1.12x; qwen3-0.6b 1.39x, 1.33x, 1.25x), slower at 8 (0.87x, 0.95x; with two or
// four output columns a warp alike): the conversions of x's rows then outweigh the weights' reads.
// A power of two, as decode graphs' row buckets are, so an eager step and its graph's bucket
// take the same kernels.
constexpr int kDecodeGemvMaxRows = 4;
// The most products one call takes (q, k and v).
constexpr int kDecodeGemvMaxProducts = 3;

// One product of a call: y (rows, n) = x (rows, k) w^T [+ add], w stored (n, k); y and add have
// row stride n, and add may be y (in place) or nullptr.
template <class T>
struct GemvProduct {
  const T* w;
  T* y;
  const T* add;
  int n;
};

// Whether a call's weights stay as they are while the step runs (an inference model's decode
// step: nothing writes them within it). Then its kernel may start while the kernels before it
// finish (programmatic dependent launch, kernels/dependent_launch.cuh), its warps' first weight
// loads going out meanwhile: at a few rows each of the step's ~170 launches otherwise spends a few
// microseconds starting up and reaching DRAM, as long as its bytes take.
enum class GemvWeights { may_change, fixed };

// Whether the kernels take this call: 1..kDecodeGemvMaxRows rows, 1..kDecodeGemvMaxProducts
// products with n >= 1, k a positive multiple of 8, x, each w and norm_w (if any) 16-byte aligned;
// with norm_w, k <= 6136 (the normalised rows in a CTA's shared memory; whatever the rows).
// A row's result does not depend on the call's other rows.
bool decode_gemv_cuda_supports(int rows, int k, const bf16* x, const GemvProduct<bf16>* products, int count,
                               const bf16* norm_w = nullptr);

// Every product of the call, in one launch on `stream` (the execution space's cudaStream_t).
// With norm_w, x's rows go through RMSNorm first (x / rms(x) * norm_w, rounded to bf16 as
// rmsnorm_forward rounds its output; eps inside the root): the layer's norm folded into the
// product that reads it, so the normalised rows never reach memory. The same for the SwiGLU form.
void decode_gemv_cuda(void* stream, int rows, int k, const bf16* x,   // x: (rows, k)
                      const GemvProduct<bf16>* products, int count, const bf16* norm_w = nullptr,   // norm_w: (k)
                      float eps = 0.0f, GemvWeights weights = GemvWeights::may_change);

// act (rows, n) = silu(g) * u with g = bf16(x w_gate^T) and u = bf16(x w_up^T), in one launch.
void decode_gemv_swiglu_cuda(void* stream, int rows, int k, const bf16* x,   // x: (rows, k)
                             const bf16* w_gate, const bf16* w_up,           // (n, k) each
                             int n, bf16* act,                               // act: (rows, n)
                             const bf16* norm_w = nullptr, float eps = 0.0f,
                             GemvWeights weights = GemvWeights::may_change);

}  // namespace shardrl::kernels
