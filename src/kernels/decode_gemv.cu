// The linear layers of a decode step on the GPU (interface and why: decode_gemv_cuda.hpp).
//
// A CTA of kWarps warps; each warp owns a few consecutive output columns of one product (for
// the SwiGLU form, those columns of both the gate and the up product) and computes them for
// every row of x. Lane l reads the 16-byte pieces l, l + 32, ... of each of its weight rows,
// kUnroll pieces in flight per row, and the same pieces of each row of x (cached: every warp of
// the GPU reads the same x); it sums weight x input in fp32 in a fixed order, then the warp sums
// its lanes by a butterfly of shuffles. Blocks are numbered product after product, so one launch
// covers q, k and v. A warp's first weight loads go out before anything else: before the wait
// for the kernel before it (where the launch lets it start early, GemvWeights::fixed) and before
// the folded norm's prologue, which then run while they are in flight.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/bf16_unpack.cuh"
#include "kernels/decode_gemv_cuda.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/swiglu_math.hpp"

namespace shardrl::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kColumns = 2;   // output columns per warp: each load of x serves both
// CTAs an SM keeps resident: room for up to 170 registers a thread (without a bound, ptxas
// capped some row counts' variants low enough to spill).
constexpr int kMinBlocks = 3;

// Whether a call of inner size k may fold the norm in: the normalised rows of the most rows
// (dynamic shared memory) and row_scales' partial sums (static) within the 48 KiB a CTA gets
// without opting in to more: k <= 6136. Decided by k alone, so that a row's bits do not depend on
// how many rows share its step (a decode graph's bucket of 4 rows draws what 3 eager rows drew).
constexpr bool folds_norm(int k) {
  return static_cast<std::size_t>(kDecodeGemvMaxRows) * k * 2 + kWarps * kDecodeGemvMaxRows * sizeof(float) <=
         48 * 1024;
}

struct GemvParams {
  const uint4* x;   // (rows, k / 8) pieces
  int rows;
  int pieces;       // k / 8
  const uint4* w[kDecodeGemvMaxProducts];
  __nv_bfloat16* y[kDecodeGemvMaxProducts];
  const __nv_bfloat16* add[kDecodeGemvMaxProducts];
  int n[kDecodeGemvMaxProducts];
  int first_block[kDecodeGemvMaxProducts + 1];   // product p owns blocks [first_block[p], first_block[p + 1])
  int count;
  const uint4* norm_w;   // (k / 8) pieces: x's rows go through RMSNorm with these weights first; or nullptr
  float eps;
};

// One 16-byte piece of a weight row, read once in the step: around L1 (no line allocated), so
// that the weights streaming through leave L1 to what is read again (x's rows in the products
// without a folded norm, whose warps all read them from global memory). Against __ldg on one
// H200 (session 36, bench_decode, three alternating runs): decode steps 1-5% faster at 1, 2 and 4
// rows (qwen3-0.6b 5% at one row, llama-1b 4% at four); marking the lines evict-first in L2 as
// well gained nothing more. A plain asm with no memory operand: the compiler may move these loads
// across griddepcontrol.wait and barriers, which is sound because nothing writes the weights while
// the kernel can run (a launch that may start early has GemvWeights::fixed; any other starts
// after the kernel before it has finished).
__device__ inline uint4 load_once(const uint4* at) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(at));
  return v;
#else
  return __ldg(at);
#endif
}

// Pieces in flight per weight row, for M weight rows against R rows of x: more where fewer rows
// leave registers free (the first batch stays live through the norm's prologue; 4 at 2 rows of
// the SwiGLU form spilled). A lane sums its pieces in the same order whatever the batch.
template <int M, int R>
constexpr int kUnroll = M * R <= 4 ? 4 : 2;

// Each row's RMSNorm scale 1 / sqrt(mean(x^2) + eps), as rmsnorm_forward forms it (its sum of
// squares reduced in another order, fixed here: lanes, then the block's warps in turn), in every
// thread of the block. Every thread must call it (a barrier).
template <int R>
__device__ inline void row_scales(const GemvParams& p, float (&scale)[R]) {
  __shared__ float partial[kWarps][R];
  float ss[R];
#pragma unroll
  for (int r = 0; r < R; ++r) ss[r] = 0.0f;
  for (int piece = threadIdx.x; piece < p.pieces; piece += blockDim.x)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float xf[8];
      unpack8(p.x[static_cast<long>(r) * p.pieces + piece], xf);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss[r] += xf[i] * xf[i];
    }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][r] = ss[r];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += partial[w][r];
    scale[r] = 1.0f / sqrtf(sum / static_cast<float>(8 * p.pieces) + p.eps);
  }
}

// The rows of x the block's warps read: x itself, or with p.norm_w the rows normalised once per
// block into shared memory (`staged`, rows x k bf16): x * scale * w rounded to bf16, the bits
// rmsnorm_forward would have written up to its scale. (Normalising in each warp's inner loop
// instead cost more than the norm's own launch at 4 rows: llama-1b on an H200, 0.82x cuBLAS.)
// Every thread of the block must call it (a barrier).
template <int R>
__device__ inline const uint4* rows_of_x(const GemvParams& p, uint4* staged) {
  if (p.norm_w == nullptr) return p.x;
  float scale[R];
  row_scales<R>(p, scale);
#pragma unroll
  for (int r = 0; r < R; ++r)
    for (int piece = threadIdx.x; piece < p.pieces; piece += blockDim.x) {
      const long at = static_cast<long>(r) * p.pieces + piece;
      float xf[8], nf[8];
      unpack8(p.x[at], xf);
      unpack8(__ldg(p.norm_w + piece), nf);
      std::uint32_t packed[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 two = __floats2bfloat162_rn(xf[2 * i] * scale[r] * nf[2 * i],
                                                         xf[2 * i + 1] * scale[r] * nf[2 * i + 1]);
        packed[i] = *reinterpret_cast<const std::uint32_t*>(&two);
      }
      staged[at] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  __syncthreads();
  return staged;
}

// Shared memory a launch needs: the normalised rows of x, when the call folds the norm in.
std::size_t staged_bytes(const GemvParams& p) {
  return p.norm_w ? static_cast<std::size_t>(p.rows) * p.pieces * sizeof(uint4) : 0;
}

// One batch of a lane's weight pieces: first, first + 32, ... (U of them) of each of the M rows,
// zero past `end`.
template <int U, int M>
__device__ inline void load_weights(const uint4* const (&wrow)[M], int first, int end, uint4 (&wv)[U][M]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int piece = first + 32 * u;
    const bool in = piece < end;
#pragma unroll
    for (int m = 0; m < M; ++m) wv[u][m] = in ? load_once(wrow[m] + piece) : make_uint4(0, 0, 0, 0);
  }
}

// M weight rows (a warp's columns, of one product or of gate and up) against R rows of x (in
// global memory, or normalised in shared memory); acc[m][r] ends as the full sum in every lane.
// Every thread of the block must call it (a barrier).
template <int R, int M>
__device__ inline void column_sums(const GemvParams& p, const uint4* const (&wrow)[M], int lane, uint4* staged,
                                   float (&acc)[M][R]) {
  constexpr int U = kUnroll<M, R>;
  uint4 wv[U][M];
  load_weights<U, M>(wrow, lane, p.pieces, wv);   // in flight through the wait and the norm's prologue
  wait_for_prerequisites();
  const uint4* x = rows_of_x<R>(p, staged);
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
#pragma unroll 1   // the U pieces in flight are the unrolling; more spills registers at 6+ rows
  for (int first = lane; first < p.pieces; first += 32 * U) {
    uint4 xv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int piece = first + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r)
        xv[u][r] = piece < p.pieces ? x[static_cast<long>(r) * p.pieces + piece] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float wf[M][8];
#pragma unroll
      for (int m = 0; m < M; ++m) unpack8(wv[u][m], wf[m]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float xf[8];
        unpack8(xv[u][r], xf);
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[m][r] = fmaf(wf[m][i], xf[i], acc[m][r]);
      }
    }
    load_weights<U, M>(wrow, first + 32 * U, p.pieces, wv);
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], offset);
}

// Calls write(m, r) once for each of the C x R outputs of a warp whose first column is j0, in
// the lane that owns it (lane (m R + r) mod 32; the sums are in every lane), for the columns
// below n.
template <int C, int R, class Write>
__device__ inline void write_outputs(int lane, int j0, int n, Write&& write) {
#pragma unroll
  for (int m = 0; m < C; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (lane == (m * R + r) % 32 && j0 + m < n) write(m, r);
}

template <int R>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) gemv_kernel(GemvParams p) {
  allow_dependents();
  // This block's product, by constant indices only (a dynamic index into the parameters put
  // them on the stack).
  const int block = static_cast<int>(blockIdx.x);
  int prod = 0;
#pragma unroll
  for (int i = 1; i < kDecodeGemvMaxProducts; ++i) prod = (i < p.count && block >= p.first_block[i]) ? i : prod;
  const uint4* w = p.w[0];
  __nv_bfloat16* y = p.y[0];
  const __nv_bfloat16* add = p.add[0];
  int n = p.n[0], first = p.first_block[0];
#pragma unroll
  for (int i = 1; i < kDecodeGemvMaxProducts; ++i)
    if (prod == i) w = p.w[i], y = p.y[i], add = p.add[i], n = p.n[i], first = p.first_block[i];
  constexpr int C = kColumns;
  const int lane = threadIdx.x % 32, j0 = ((block - first) * kWarps + threadIdx.x / 32) * C;
  // Columns past n (the last block's) compute column n - 1 again and are not written: every
  // warp reaches the barriers.
  const uint4* wrow[C];
#pragma unroll
  for (int m = 0; m < C; ++m) wrow[m] = w + static_cast<long>(min(j0 + m, n - 1)) * p.pieces;
  extern __shared__ uint4 staged[];
  float acc[C][R];
  column_sums<R, C>(p, wrow, lane, staged, acc);
  write_outputs<C, R>(lane, j0, n, [&](int m, int r) {
    const long i = static_cast<long>(r) * n + j0 + m;
    y[i] = __float2bfloat16_rn(acc[m][r] + (add ? __bfloat162float(add[i]) : 0.0f));
  });
}

// Product 0's weights are the gate's, product 1's the up's; y[0] takes the activation.
template <int R>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) gemv_swiglu_kernel(GemvParams p) {
  allow_dependents();
  const int n = p.n[0];
  constexpr int C = kColumns;
  const int lane = threadIdx.x % 32, j0 = (static_cast<int>(blockIdx.x) * kWarps + threadIdx.x / 32) * C;
  const uint4* wrow[2 * C];
#pragma unroll
  for (int m = 0; m < 2 * C; ++m) wrow[m] = p.w[m / C] + static_cast<long>(min(j0 + m % C, n - 1)) * p.pieces;
  extern __shared__ uint4 staged[];
  float acc[2 * C][R];
  column_sums<R, 2 * C>(p, wrow, lane, staged, acc);
  write_outputs<C, R>(lane, j0, n, [&](int m, int r) {
    // As kernels::swiglu_forward computes it from the GEMMs' bf16 outputs.
    const float g = __bfloat162float(__float2bfloat16_rn(acc[m][r]));
    const float u = __bfloat162float(__float2bfloat16_rn(acc[C + m][r]));
    p.y[0][static_cast<long>(r) * n + j0 + m] = __float2bfloat16_rn(swiglu_math::activation(g, u));
  });
}

int blocks_for(int n) { return (n + kWarps * kColumns - 1) / (kWarps * kColumns); }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <template <int> class Launch>
void for_rows(int rows, cudaStream_t stream, const GemvParams& p, GemvWeights weights) {
  static_assert(kDecodeGemvMaxRows == 4, "one case per row count");
  switch (rows) {
    case 1: return Launch<1>::run(stream, p, weights);
    case 2: return Launch<2>::run(stream, p, weights);
    case 3: return Launch<3>::run(stream, p, weights);
    default: return Launch<4>::run(stream, p, weights);
  }
}

// A launch of `kernel` over `blocks` CTAs, allowed to start before the kernel ahead of it on the
// stream finishes where the weights are fixed and the kernel has the instructions for it
// (`early_compiled`: dependent_launch_compiled, kernels/dependent_launch.cuh).
void launch(void (*kernel)(GemvParams), bool early_compiled, int blocks, cudaStream_t stream, const GemvParams& p,
            GemvWeights weights) {
  launch_maybe_early(kernel, weights == GemvWeights::fixed && early_compiled, dim3(static_cast<unsigned>(blocks)),
                     dim3(kWarps * 32), staged_bytes(p), stream, p);
}

template <int R>
struct LaunchGemv {
  static void run(cudaStream_t stream, const GemvParams& p, GemvWeights weights) {
    static const bool early = dependent_launch_compiled(reinterpret_cast<const void*>(gemv_kernel<R>));
    launch(gemv_kernel<R>, early, p.first_block[p.count], stream, p, weights);
  }
};

template <int R>
struct LaunchSwiglu {
  static void run(cudaStream_t stream, const GemvParams& p, GemvWeights weights) {
    static const bool early = dependent_launch_compiled(reinterpret_cast<const void*>(gemv_swiglu_kernel<R>));
    launch(gemv_swiglu_kernel<R>, early, blocks_for(p.n[0]), stream, p, weights);
  }
};

GemvParams params_for(int rows, int k, const bf16* x, const bf16* norm_w, float eps) {
  GemvParams p{};
  p.x = reinterpret_cast<const uint4*>(x);
  p.rows = rows;
  p.pieces = k / 8;
  p.norm_w = reinterpret_cast<const uint4*>(norm_w);
  p.eps = eps;
  return p;
}

}  // namespace

bool decode_gemv_cuda_supports(int rows, int k, const bf16* x, const GemvProduct<bf16>* products, int count,
                               const bf16* norm_w) {
  if (rows < 1 || rows > kDecodeGemvMaxRows || k < 8 || k % 8 != 0) return false;
  if (!aligned16(x) || !aligned16(norm_w)) return false;   // nullptr is aligned
  if (norm_w && !folds_norm(k)) return false;
  if (count < 1 || count > kDecodeGemvMaxProducts) return false;
  for (int i = 0; i < count; ++i)
    if (products[i].n < 1 || !aligned16(products[i].w)) return false;
  return true;
}

void decode_gemv_cuda(void* stream, int rows, int k, const bf16* x, const GemvProduct<bf16>* products, int count,
                      const bf16* norm_w, float eps, GemvWeights weights) {
  SHARDRL_CHECK(decode_gemv_cuda_supports(rows, k, x, products, count, norm_w),
                "decode_gemv_cuda: unsupported call (1..4 rows, 1..3 products, k a multiple of 8, 16-byte aligned x, "
                "w and norm weights)");
  GemvParams p = params_for(rows, k, x, norm_w, eps);
  p.count = count;
  for (int i = 0; i < count; ++i) {
    p.w[i] = reinterpret_cast<const uint4*>(products[i].w);
    p.y[i] = reinterpret_cast<__nv_bfloat16*>(products[i].y);
    p.add[i] = reinterpret_cast<const __nv_bfloat16*>(products[i].add);
    p.n[i] = products[i].n;
    p.first_block[i + 1] = p.first_block[i] + blocks_for(products[i].n);
  }
  for_rows<LaunchGemv>(rows, static_cast<cudaStream_t>(stream), p, weights);
}

void decode_gemv_swiglu_cuda(void* stream, int rows, int k, const bf16* x, const bf16* w_gate, const bf16* w_up,
                             int n, bf16* act, const bf16* norm_w, float eps, GemvWeights weights) {
  const GemvProduct<bf16> both[2] = {{w_gate, act, nullptr, n}, {w_up, act, nullptr, n}};
  SHARDRL_CHECK(decode_gemv_cuda_supports(rows, k, x, both, 2, norm_w),
                "decode_gemv_swiglu_cuda: unsupported call (1..4 rows, k a multiple of 8, 16-byte aligned x, w and "
                "norm weights)");
  GemvParams p = params_for(rows, k, x, norm_w, eps);
  p.count = 2;
  p.w[0] = reinterpret_cast<const uint4*>(w_gate);
  p.w[1] = reinterpret_cast<const uint4*>(w_up);
  p.y[0] = reinterpret_cast<__nv_bfloat16*>(act);
  p.n[0] = n;
  for_rows<LaunchSwiglu>(rows, static_cast<cudaStream_t>(stream), p, weights);
}

}  // namespace shardrl::kernels
