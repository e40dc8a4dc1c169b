// The pieces the tensor-core attention's kernels share (flash_attention.cu: forward;
// flash_attention_backward.cu: backward): warp-level MMA primitives, swizzled shared-memory
// tiles, the key/value stream, a warp's rows and their windows, and the launch helpers. CUDA
// only (nvcc); the interface and its contract are in flash_attention.hpp.
//
// FlashAttention-2's structure on the warp-level bf16 MMA (mma.sync m16n8k16, fp32 accumulate):
// a CTA of W warps owns 16*W query rows (forward, dQ) or key rows (dK/dV) of one head; each warp
// owns 16 of them and keeps its accumulators in registers. The other operand streams through
// shared memory tile by tile (cp.async, two stages), read with ldmatrix from rows whose 16-byte
// chunks are XOR-swizzled by row so that the 8 rows of an ldmatrix phase hit distinct banks.
// The C fragment of one product is, element for element, the A fragment of the next (P -> PV,
// dS -> dS K), so probabilities never leave registers.
//
// Masking follows the positions (kernels/attention.hpp): token i of a row sees keys
// [i - positions[i], i]. Starts are non-decreasing along a row, so a query tile needs the keys
// from its first query's start to its last query, and a key tile the queries up to the end of
// the sequence that holds its last key. Tiles wholly inside every warp row's window skip the
// per-element mask.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl::kernels::flash {

using bf16_t = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- warp-level primitives -------------------------------------------------------------------

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a (16x16, row-major) * b (16x8, column-major), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of two bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// The A fragment (16 rows x 16 columns) for k-step kk of a product whose A is the C fragments c
// of the previous one (n-tiles 2kk and 2kk+1): the register layouts coincide.
__device__ __forceinline__ void c_to_a(std::uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
  // src-size 0 fills the 16 bytes with zeros (rows past the end of the row of tokens).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 2^x by the special-function unit (one instruction; exp2f adds range handling we do not need:
// arguments are <= 0 or -inf, results in [0, 1]).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 4 bytes global -> shared, zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(std::uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- shared-memory tiles ---------------------------------------------------------------------

// A tile of rows x HD bf16, row-major, 16-byte chunk c of row r stored at chunk c ^ (r % 8).
template <int HD>
struct Tile {
  std::uint32_t base;   // shared-memory address
  __device__ std::uint32_t at(int row, int chunk) const {
    return base + static_cast<std::uint32_t>((row * HD + ((chunk ^ (row & 7)) << 3)) * 2);
  }
  // A operand rows r0..r0+15, columns c0..c0+15; equally the B operand of k rows c0.. and n
  // columns n0..n0+15 of a tile stored [k][n] (ldmatrix.trans), two n-tiles of 8.
  __device__ void load_a(std::uint32_t (&r)[4], int r0, int c0) const {
    const int lane = threadIdx.x & 31;
    ldmatrix_x4(r, at(r0 + (lane & 15), (c0 >> 3) + (lane >> 4)));
  }
  __device__ void load_b_trans(std::uint32_t (&r)[4], int k0, int n0) const {
    const int lane = threadIdx.x & 31;
    ldmatrix_x4_trans(r, at(k0 + (lane & 15), (n0 >> 3) + (lane >> 4)));
  }
  // B operand of a tile stored [n][k]: n-tiles n0 and n0+8 (r[0..1] and r[2..3]), k0..k0+15.
  __device__ void load_b(std::uint32_t (&r)[4], int n0, int k0) const {
    const int lane = threadIdx.x & 31;
    ldmatrix_x4(r, at(n0 + (lane & 7) + ((lane >> 4) << 3), (k0 >> 3) + ((lane >> 3) & 1)));
  }
  // Rows [0, rows) from global rows src + r * ld, rows >= valid zero-filled; all threads of the CTA.
  template <int ROWS>
  __device__ void fetch(const bf16_t* src, long ld, int valid) const {
    constexpr int kChunks = HD / 8;
    for (int c = threadIdx.x; c < ROWS * kChunks; c += blockDim.x) {
      const int r = c / kChunks, ch = c % kChunks;
      const bool ok = r < valid;
      cp_async_16(at(r, ch), src + (ok ? r : 0) * ld + ch * 8, ok);
    }
  }
};

// ---- one k-step of a warp's tile product ------------------------------------------------------
// Every product in these kernels is acc (16 rows x n) += A (16 x 16, one k-step) x B, with B from
// shared memory in one of two layouts: the 2*N16 n-tiles of a tile stored [n][k] (keys against
// queries: Q K^T, dO V^T, K Q^T, V dO^T), or all HD columns of a tile stored [k][n] (P V, P^T dO,
// dS K, dS^T Q).

template <int N16, int HD>
__device__ __forceinline__ void mma_rows(float (&acc)[2 * N16][4], const std::uint32_t (&a)[4], const Tile<HD>& b,
                                         int k0) {
#pragma unroll
  for (int nn = 0; nn < N16; ++nn) {
    std::uint32_t f[4];
    b.load_b(f, nn * 16, k0);
    mma_bf16(acc[2 * nn], a, f[0], f[1]);
    mma_bf16(acc[2 * nn + 1], a, f[2], f[3]);
  }
}

template <int HD>
__device__ __forceinline__ void mma_columns(float (&acc)[HD / 8][4], const std::uint32_t (&a)[4], const Tile<HD>& b,
                                            int k0) {
#pragma unroll
  for (int dd = 0; dd < HD / 16; ++dd) {
    std::uint32_t f[4];
    b.load_b_trans(f, k0, dd * 16);
    mma_bf16(acc[2 * dd], a, f[0], f[1]);
    mma_bf16(acc[2 * dd + 1], a, f[2], f[3]);
  }
}

// ---- parameters ------------------------------------------------------------------------------

struct Params {
  const std::int32_t* positions;
  const bf16_t *q, *k, *v, *out, *dout;
  bf16_t *o, *dq, *dk, *dv;
  float* lse;            // forward: written
  const float* lse_in;   // backward: read
  float* delta;
  int S, H, G;
  float scale;           // 1 / sqrt(hd)
};

// ---- the keys a query tile sees, and the rows of a warp ----------------------------------------

// The key and value tiles of one kv head of one row of tokens, streamed tile by tile through two
// shared-memory stages each (the forward and dQ kernels walk the keys their query tile sees). A
// stage's tile is found by arithmetic, never by a run-time index into an array (which would put
// the array in local memory).
template <int HD, int BN>
struct KeyValueStream {
  static constexpr std::uint32_t kStage = BN * HD * sizeof(bf16_t);
  std::uint32_t k_base, v_base;   // stage 0 of each; stage 1 follows it
  const bf16_t *k, *v;            // slot 0 of the row, this kv head
  long ld;                        // elements from one token to the next
  int S;
  __device__ Tile<HD> keys(int stage) const { return {k_base + stage * kStage}; }
  __device__ Tile<HD> values(int stage) const { return {v_base + stage * kStage}; }
  // Issues tile t's copies into `stage` (the caller commits them).
  __device__ void fetch(int t, int stage) const {
    const long first = static_cast<long>(t) * BN;
    keys(stage).template fetch<BN>(k + first * ld, ld, S - static_cast<int>(first));
    values(stage).template fetch<BN>(v + first * ld, ld, S - static_cast<int>(first));
  }
  // At the top of iteration t of [.., t_end): tile t + 1 into the other stage, then waits for
  // tile t (issued an iteration earlier) and for every thread of the CTA.
  __device__ void advance(int t, int t_end, int stage) const {
    if (t + 1 < t_end) {
      fetch(t + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
  }
};

// Stages at smem (two of K, then two of V) for the row of tokens starting at token tok0, kv head g.
template <int HD, int BN>
__device__ KeyValueStream<HD, BN> key_value_stream(const Params& p, std::uint32_t smem, long tok0, int g) {
  const long ld = static_cast<long>(p.G) * HD;
  const long at = tok0 * ld + static_cast<long>(g) * HD;
  return {smem, smem + 2 * KeyValueStream<HD, BN>::kStage, p.k + at, p.v + at, ld, p.S};
}

// The two query rows a thread holds (C-fragment rows lane/4 and lane/4 + 8 of its warp's 16) and
// the windows of keys they see. A row past the end of the row of tokens starts at S: it sees
// nothing and is not written.
struct WarpRows {
  int row[2], start[2];
  int first;       // the warp's first row
  int start_max;   // the latest start among the warp's rows
  __device__ WarpRows(const std::int32_t* pos, int S, int w0) : first(w0) {
    const int lane = threadIdx.x & 31;
    row[0] = w0 + (lane >> 2);
    row[1] = row[0] + 8;
#pragma unroll
    for (int r = 0; r < 2; ++r) start[r] = row[r] < S ? row[r] - pos[row[r]] : S;
    start_max = max(start[0], start[1]);
    for (int off = 16; off > 0; off >>= 1) start_max = max(start_max, __shfl_xor_sync(0xffffffffu, start_max, off));
  }
  // Keys [n0, n0 + n) lie inside every row's window: the tile needs no mask.
  __device__ bool window_holds(int n0, int n) const { return n0 + n - 1 <= first && n0 >= start_max; }
  __device__ bool sees(int r, int key) const { return key <= row[r] && key >= start[r]; }
};

// ---- host side -------------------------------------------------------------------------------

// Tile shapes per head dimension: a warp's accumulators, its A fragments and one score tile
// must fit in registers (dK/dV keep two HD-wide accumulators, dQ two A operands).
template <int HD>
struct Tiles {
  static constexpr int kWarps = 4;
  static constexpr int kDkdvQueries = HD == 128 ? 32 : 64;   // BM of the dK/dV kernel
  static constexpr int kDqKeys = HD == 128 ? 32 : 64;        // BN of the dQ kernel
};

template <class Kernel>
inline void launch(Kernel kernel, dim3 grid, int threads, std::size_t smem, cudaStream_t stream, const Params& p) {
  // Above 48 KiB a kernel must opt in to dynamic shared memory; asking again is harmless.
  SHARDRL_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, threads, smem, stream>>>(p);
  SHARDRL_CHECK_CUDA(cudaGetLastError());
}

inline Params make_params(const AttentionShape& s, const std::int32_t* positions) {
  Params p{};
  p.positions = positions;
  p.S = s.S;
  p.H = s.n_heads;
  p.G = s.n_kv_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  return p;
}

inline const bf16_t* raw(const bf16* x) { return reinterpret_cast<const bf16_t*>(x); }
inline bf16_t* raw(bf16* x) { return reinterpret_cast<bf16_t*>(x); }

inline void check_shape(const AttentionShape& s, const std::int32_t* positions) {
  if (s.B < 1 || s.S < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || positions == nullptr ||
      !flash_attention_supports_head_dim(s.hd) || s.B > 65535 || s.n_heads > 65535)
    SHARDRL_FATAL("flash attention: unsupported shape (needs head_dim 64 or 128, n_heads % n_kv_heads == 0)");
}

}  // namespace shardrl::kernels::flash
