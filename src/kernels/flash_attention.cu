// Tensor-core causal attention for GPU builds (interface and contract: flash_attention.hpp).
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
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/flash_attention.hpp"

namespace shardrl::kernels {
namespace {

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

// ---- forward ---------------------------------------------------------------------------------

template <int HD, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) flash_forward_kernel(Params p) {
  constexpr int BM = WARPS * 16, BN = 64;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* sq = reinterpret_cast<bf16_t*>(smem);
  // Q, then K and V in two stages each; a stage's tile is found by arithmetic, never by a
  // run-time index into an array (which would put the array in local memory).
  constexpr std::uint32_t kStage = BN * HD * sizeof(bf16_t);
  const Tile<HD> tq{smem_addr(sq)};
  const std::uint32_t k_base = smem_addr(sq + BM * HD), v_base = k_base + 2 * kStage;
  auto tk = [&](int stage) { return Tile<HD>{k_base + stage * kStage}; };
  auto tv = [&](int stage) { return Tile<HD>{v_base + stage * kStage}; };

  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;   // the longest tiles first
  const int h = blockIdx.y, b = blockIdx.z, g = h / (p.H / p.G);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long tok0 = static_cast<long>(b) * p.S;
  const std::int32_t* pos = p.positions + tok0;
  const long q_ld = static_cast<long>(p.H) * HD, kv_ld = static_cast<long>(p.G) * HD;
  const bf16_t* kg = p.k + tok0 * kv_ld + static_cast<long>(g) * HD;
  const bf16_t* vg = p.v + tok0 * kv_ld + static_cast<long>(g) * HD;

  const int q_valid = min(BM, p.S - m0);
  const int t_begin = (m0 - pos[m0]) / BN, t_end = (m0 + q_valid + BN - 1) / BN;
  tq.template fetch<BM>(p.q + (tok0 + m0) * q_ld + static_cast<long>(h) * HD, q_ld, q_valid);
  tk(0).template fetch<BN>(kg + t_begin * BN * kv_ld, kv_ld, p.S - t_begin * BN);
  tv(0).template fetch<BN>(vg + t_begin * BN * kv_ld, kv_ld, p.S - t_begin * BN);
  cp_async_commit();

  // This thread's two rows of the warp's 16 (C-fragment rows lane/4 and lane/4 + 8); a row past
  // the end starts at S: it sees nothing and is not written.
  const int w0 = m0 + warp * 16;
  const int i0 = w0 + (lane >> 2), i1 = i0 + 8;
  const int start0 = i0 < p.S ? i0 - pos[i0] : p.S;
  const int start1 = i1 < p.S ? i1 - pos[i1] : p.S;
  int start_max = max(start0, start1);
  for (int off = 16; off > 0; off >>= 1) start_max = max(start_max, __shfl_xor_sync(0xffffffffu, start_max, off));

  std::uint32_t qf[HD / 16][4];
  float o[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float scale_log2 = p.scale * kLog2e;

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) & 1;
    if (t + 1 < t_end) {
      const long next = static_cast<long>(t + 1) * BN;
      tk(stage ^ 1).template fetch<BN>(kg + next * kv_ld, kv_ld, p.S - static_cast<int>(next));
      tv(stage ^ 1).template fetch<BN>(vg + next * kv_ld, kv_ld, p.S - static_cast<int>(next));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (t == t_begin) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) tq.load_a(qf[kk], warp * 16, kk * 16);
    }

    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) mma_rows<BN / 16>(s, qf[kk], tk(stage), kk * 16);

    // Raw scores: the scale (> 0) commutes with the max, and goes into one FMA with the exponent.
    const int n0 = t * BN;
    if (!(n0 + BN - 1 <= w0 && n0 >= start_max)) {   // the tile crosses some row's window
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + 8 * j + 2 * (lane & 3) + (e & 1);
          if (key > (e < 2 ? i0 : i1) || key < (e < 2 ? start0 : start1)) s[j][e] = -INFINITY;
        }
    }
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      const float base = mx[r] == -INFINITY ? 0.0f : mx[r] * scale_log2;   // a row with no key yet
      alpha[r] = fast_exp2(m_run[r] * scale_log2 - base);
      m_run[r] = mx[r];
      mx[r] = base;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = fast_exp2(fmaf(s[j][e], scale_log2, -mx[e >> 1]));
        sum[e >> 1] += s[j][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + sum[r];
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      std::uint32_t pa[4];
      c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
      mma_columns(o, pa, tv(stage), kk * 16);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = r == 0 ? i0 : i1;
    const float l = quad_sum(l_run[r]);
    if (i >= p.S) continue;
    const float inv = 1.0f / l;
    bf16_t* orow = p.o + (tok0 + i) * q_ld + static_cast<long>(h) * HD;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
      *reinterpret_cast<std::uint32_t*>(orow + 8 * d + 2 * (lane & 3)) =
          pack_bf16(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if ((lane & 3) == 0) p.lse[(tok0 + i) * p.H + h] = (m_run[r] * scale_log2 + log2f(l)) * kLn2;
  }
}

// ---- backward: D = rowsum(dout * out) --------------------------------------------------------

template <int HD>
__global__ void flash_delta_kernel(Params p, long rows) {
  constexpr int kLanes = HD / 8;   // threads per (token, head) row, 8 elements each
  const long gid = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long row = gid / kLanes;
  const int c = static_cast<int>(gid % kLanes);
  float acc = 0.0f;
  if (row < rows) {
    const uint4 a = *reinterpret_cast<const uint4*>(p.out + row * HD + c * 8);
    const uint4 d = *reinterpret_cast<const uint4*>(p.dout + row * HD + c * 8);
    const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
    const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 x = __bfloat1622float2(a2[e]), y = __bfloat1622float2(d2[e]);
      acc += x.x * y.x + x.y * y.y;
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (row < rows && c == 0) p.delta[row] = acc;
}

// ---- backward: dK, dV per key tile -----------------------------------------------------------

// Per-query values of one query tile, beside its Q and dO tiles, copied as they are stored
// (asynchronously, like the tiles: a plain load would stall the warp before its products).
template <int BM>
struct QueryMeta {
  float lse[BM];
  float delta[BM];
  std::int32_t position[BM];   // 0 past the end of the row (such queries are masked by index)
};

template <int HD, int WARPS, int BM>
__global__ void __launch_bounds__(WARPS * 32) flash_dkdv_kernel(Params p) {
  constexpr int BN = WARPS * 16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* base = reinterpret_cast<bf16_t*>(smem);
  const Tile<HD> tk{smem_addr(base)}, tv{smem_addr(base + BN * HD)};
  constexpr std::uint32_t kStage = BM * HD * sizeof(bf16_t);
  const std::uint32_t q_base = smem_addr(base + 2 * BN * HD), do_base = q_base + 2 * kStage;
  auto tq = [&](int stage) { return Tile<HD>{q_base + stage * kStage}; };
  auto tdo = [&](int stage) { return Tile<HD>{do_base + stage * kStage}; };
  QueryMeta<BM>* meta = reinterpret_cast<QueryMeta<BM>*>(base + (2 * BN + 4 * BM) * HD);
  __shared__ int last_tile;

  const int n0 = blockIdx.x * BN, g = blockIdx.y, b = blockIdx.z;
  const int group = p.H / p.G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long tok0 = static_cast<long>(b) * p.S;
  const std::int32_t* pos = p.positions + tok0;
  const long q_ld = static_cast<long>(p.H) * HD, kv_ld = static_cast<long>(p.G) * HD;
  const int k_valid = min(BN, p.S - n0), n_last = n0 + k_valid - 1;

  // Query tiles from the one holding key n0 to the last whose first query's sequence starts at
  // or before the last key (starts never decrease along the row).
  const int first_tile = n0 / BM;
  if (threadIdx.x == 0) last_tile = first_tile;
  __syncthreads();
  for (int t = first_tile + 1 + threadIdx.x; t * BM < p.S; t += blockDim.x)
    if (t * BM - pos[t * BM] <= n_last) atomicMax(&last_tile, t);
  __syncthreads();
  const int tiles = last_tile - first_tile + 1, jobs = group * tiles;

  auto fetch_job = [&](int job, int stage) {
    const int h = g * group + job / tiles, m0 = (first_tile + job % tiles) * BM;
    const int valid = min(BM, p.S - m0);
    const long off = (tok0 + m0) * q_ld + static_cast<long>(h) * HD;
    tq(stage).template fetch<BM>(p.q + off, q_ld, valid);
    tdo(stage).template fetch<BM>(p.dout + off, q_ld, valid);
    for (int r = threadIdx.x; r < BM; r += blockDim.x) {
      const int i = m0 + r;
      const bool ok = i < p.S;
      const long at = (tok0 + (ok ? i : 0)) * p.H + h;
      cp_async_4(smem_addr(&meta[stage].lse[r]), p.lse_in + at, ok);
      cp_async_4(smem_addr(&meta[stage].delta[r]), p.delta + at, ok);
      cp_async_4(smem_addr(&meta[stage].position[r]), pos + (ok ? i : 0), ok);
    }
  };
  tk.template fetch<BN>(p.k + (tok0 + n0) * kv_ld + static_cast<long>(g) * HD, kv_ld, k_valid);
  tv.template fetch<BN>(p.v + (tok0 + n0) * kv_ld + static_cast<long>(g) * HD, kv_ld, k_valid);
  fetch_job(0, 0);
  cp_async_commit();

  const int j0 = n0 + warp * 16 + (lane >> 2), j1 = j0 + 8;   // this thread's keys
  const float scale_log2 = p.scale * kLog2e;
  float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.0f;

  for (int job = 0; job < jobs; ++job) {
    const int stage = job & 1;
    if (job + 1 < jobs) {
      fetch_job(job + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int m0 = (first_tile + job % tiles) * BM;
    const QueryMeta<BM>& qm = meta[stage];

    // S^T = K Q^T (the warp's 16 keys x BM queries), then P^T.
    float st[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      std::uint32_t ka[4];
      tk.load_a(ka, warp * 16, kk * 16);
      mma_rows<BM / 16>(st, ka, tq(stage), kk * 16);
    }
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * (lane & 3) + (e & 1), key = e < 2 ? j0 : j1, i = m0 + c;
        const bool seen = key <= i && i < p.S && key >= i - qm.position[c];
        st[j][e] = seen ? fast_exp2(fmaf(st[j][e], scale_log2, -qm.lse[c] * kLog2e)) : 0.0f;
      }
    // dV += P^T dO
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      std::uint32_t pa[4];
      c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
      mma_columns(dv, pa, tdo(stage), kk * 16);
    }
    // dP^T = V dO^T, then dS^T = P^T (dP^T - D)
    float dpt[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      std::uint32_t va[4];
      tv.load_a(va, warp * 16, kk * 16);
      mma_rows<BM / 16>(dpt, va, tdo(stage), kk * 16);
    }
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * (lane & 3) + (e & 1);
        dpt[j][e] = st[j][e] * (dpt[j][e] - qm.delta[c]);
      }
    // dK += dS^T Q
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      std::uint32_t da[4];
      c_to_a(da, dpt[2 * kk], dpt[2 * kk + 1]);
      mma_columns(dk, da, tq(stage), kk * 16);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = r == 0 ? j0 : j1;
    if (j >= p.S) continue;
    const long at = (tok0 + j) * kv_ld + static_cast<long>(g) * HD;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
      const int col = 8 * d + 2 * (lane & 3);
      *reinterpret_cast<std::uint32_t*>(p.dk + at + col) =
          pack_bf16(dk[d][2 * r] * p.scale, dk[d][2 * r + 1] * p.scale);
      *reinterpret_cast<std::uint32_t*>(p.dv + at + col) = pack_bf16(dv[d][2 * r], dv[d][2 * r + 1]);
    }
  }
}

// ---- backward: dQ per query tile -------------------------------------------------------------

template <int HD, int WARPS, int BN>
__global__ void __launch_bounds__(WARPS * 32) flash_dq_kernel(Params p) {
  constexpr int BM = WARPS * 16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* base = reinterpret_cast<bf16_t*>(smem);
  const Tile<HD> tq{smem_addr(base)}, tdo{smem_addr(base + BM * HD)};
  constexpr std::uint32_t kStage = BN * HD * sizeof(bf16_t);
  const std::uint32_t k_base = smem_addr(base + 2 * BM * HD), v_base = k_base + 2 * kStage;
  auto tk = [&](int stage) { return Tile<HD>{k_base + stage * kStage}; };
  auto tv = [&](int stage) { return Tile<HD>{v_base + stage * kStage}; };

  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;
  const int h = blockIdx.y, b = blockIdx.z, g = h / (p.H / p.G);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long tok0 = static_cast<long>(b) * p.S;
  const std::int32_t* pos = p.positions + tok0;
  const long q_ld = static_cast<long>(p.H) * HD, kv_ld = static_cast<long>(p.G) * HD;
  const bf16_t* kg = p.k + tok0 * kv_ld + static_cast<long>(g) * HD;
  const bf16_t* vg = p.v + tok0 * kv_ld + static_cast<long>(g) * HD;

  const int q_valid = min(BM, p.S - m0);
  const int t_begin = (m0 - pos[m0]) / BN, t_end = (m0 + q_valid + BN - 1) / BN;
  const long qoff = (tok0 + m0) * q_ld + static_cast<long>(h) * HD;
  tq.template fetch<BM>(p.q + qoff, q_ld, q_valid);
  tdo.template fetch<BM>(p.dout + qoff, q_ld, q_valid);
  tk(0).template fetch<BN>(kg + t_begin * BN * kv_ld, kv_ld, p.S - t_begin * BN);
  tv(0).template fetch<BN>(vg + t_begin * BN * kv_ld, kv_ld, p.S - t_begin * BN);
  cp_async_commit();

  const int w0 = m0 + warp * 16;
  const int i0 = w0 + (lane >> 2), i1 = i0 + 8;
  int start[2], row[2] = {i0, i1};
  float lse_log2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool ok = row[r] < p.S;
    const long at = (tok0 + row[r]) * p.H + h;
    start[r] = ok ? row[r] - pos[row[r]] : p.S;
    lse_log2[r] = ok ? p.lse_in[at] * kLog2e : 0.0f;
    delta[r] = ok ? p.delta[at] : 0.0f;
  }
  int start_max = max(start[0], start[1]);
  for (int off = 16; off > 0; off >>= 1) start_max = max(start_max, __shfl_xor_sync(0xffffffffu, start_max, off));
  const float scale_log2 = p.scale * kLog2e;

  std::uint32_t qf[HD / 16][4], dof[HD / 16][4];
  float dq[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) & 1;
    if (t + 1 < t_end) {
      const long next = static_cast<long>(t + 1) * BN;
      tk(stage ^ 1).template fetch<BN>(kg + next * kv_ld, kv_ld, p.S - static_cast<int>(next));
      tv(stage ^ 1).template fetch<BN>(vg + next * kv_ld, kv_ld, p.S - static_cast<int>(next));
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (t == t_begin) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        tq.load_a(qf[kk], warp * 16, kk * 16);
        tdo.load_a(dof[kk], warp * 16, kk * 16);
      }
    }
    // S = Q K^T and dP = dO V^T (the warp's 16 queries x BN keys)
    float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      mma_rows<BN / 16>(s, qf[kk], tk(stage), kk * 16);
      mma_rows<BN / 16>(dp, dof[kk], tv(stage), kk * 16);
    }
    // dS = P (dP - D); the mask only where the tile crosses some row's window
    const int n0 = t * BN;
    const bool unmasked = n0 + BN - 1 <= w0 && n0 >= start_max;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pr = fast_exp2(fmaf(s[j][e], scale_log2, -lse_log2[r]));
        if (!unmasked) {
          const int key = n0 + 8 * j + 2 * (lane & 3) + (e & 1);
          if (key > row[r] || key < start[r]) pr = 0.0f;
        }
        s[j][e] = pr * (dp[j][e] - delta[r]);
      }
    // dQ += dS K
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      std::uint32_t da[4];
      c_to_a(da, s[2 * kk], s[2 * kk + 1]);
      mma_columns(dq, da, tk(stage), kk * 16);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= p.S) continue;
    bf16_t* qrow = p.dq + (tok0 + row[r]) * q_ld + static_cast<long>(h) * HD;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
      *reinterpret_cast<std::uint32_t*>(qrow + 8 * d + 2 * (lane & 3)) =
          pack_bf16(dq[d][2 * r] * p.scale, dq[d][2 * r + 1] * p.scale);
  }
}

// ---- launchers -------------------------------------------------------------------------------

// Tile shapes per head dimension: a warp's accumulators, its A fragments and one score tile
// must fit in registers (dK/dV keep two HD-wide accumulators, dQ two A operands).
template <int HD>
struct Tiles {
  static constexpr int kWarps = 4;
  static constexpr int kDkdvQueries = HD == 128 ? 32 : 64;   // BM of the dK/dV kernel
  static constexpr int kDqKeys = HD == 128 ? 32 : 64;        // BN of the dQ kernel
};

template <class Kernel>
void launch(Kernel kernel, dim3 grid, int threads, std::size_t smem, cudaStream_t stream, const Params& p) {
  // Above 48 KiB a kernel must opt in to dynamic shared memory; asking again is harmless.
  SHARDRL_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<grid, threads, smem, stream>>>(p);
  SHARDRL_CHECK_CUDA(cudaGetLastError());
}

Params make_params(const AttentionShape& s, const std::int32_t* positions) {
  Params p{};
  p.positions = positions;
  p.S = s.S;
  p.H = s.n_heads;
  p.G = s.n_kv_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  return p;
}

const bf16_t* raw(const bf16* x) { return reinterpret_cast<const bf16_t*>(x); }
bf16_t* raw(bf16* x) { return reinterpret_cast<bf16_t*>(x); }

template <int HD>
void forward(cudaStream_t stream, const AttentionShape& s, const Params& p) {
  constexpr int W = Tiles<HD>::kWarps, BM = W * 16, BN = 64;
  const dim3 grid((s.S + BM - 1) / BM, s.n_heads, s.B);
  launch(flash_forward_kernel<HD, W>, grid, W * 32, (BM + 4 * BN) * HD * sizeof(bf16_t), stream, p);
}

template <int HD>
void backward(cudaStream_t stream, const AttentionShape& s, const Params& p) {
  constexpr int W = Tiles<HD>::kWarps, BMq = Tiles<HD>::kDkdvQueries, BNk = Tiles<HD>::kDqKeys, T = W * 16;
  const long rows = static_cast<long>(s.B) * s.S * s.n_heads;
  const long threads = rows * (HD / 8);
  flash_delta_kernel<HD><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(p, rows);
  SHARDRL_CHECK_CUDA(cudaGetLastError());
  const std::size_t dkdv_smem = (2 * T + 4 * BMq) * HD * sizeof(bf16_t) + 2 * sizeof(QueryMeta<BMq>);
  launch(flash_dkdv_kernel<HD, W, BMq>, dim3((s.S + T - 1) / T, s.n_kv_heads, s.B), W * 32, dkdv_smem, stream, p);
  launch(flash_dq_kernel<HD, W, BNk>, dim3((s.S + T - 1) / T, s.n_heads, s.B), W * 32,
         (2 * T + 4 * BNk) * HD * sizeof(bf16_t), stream, p);
}

void check_shape(const AttentionShape& s, const std::int32_t* positions) {
  if (s.B < 1 || s.S < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || positions == nullptr ||
      !flash_attention_supports_head_dim(s.hd) || s.B > 65535 || s.n_heads > 65535)
    SHARDRL_FATAL("flash attention: unsupported shape (needs head_dim 64 or 128, n_heads % n_kv_heads == 0)");
}

}  // namespace

bool flash_attention_available() { return true; }

void flash_attention_forward(void* stream, const AttentionShape& s, const std::int32_t* positions, const bf16* q,
                             const bf16* k, const bf16* v, bf16* out, float* lse) {
  check_shape(s, positions);
  Params p = make_params(s, positions);
  p.q = raw(q);
  p.k = raw(k);
  p.v = raw(v);
  p.o = raw(out);
  p.lse = lse;
  auto st = static_cast<cudaStream_t>(stream);
  if (s.hd == 64) forward<64>(st, s, p);
  else forward<128>(st, s, p);
}

void flash_attention_backward(void* stream, const AttentionShape& s, const std::int32_t* positions, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* out, const float* lse, const bf16* dout,
                              bf16* dq, bf16* dk, bf16* dv, float* delta) {
  check_shape(s, positions);
  Params p = make_params(s, positions);
  p.q = raw(q);
  p.k = raw(k);
  p.v = raw(v);
  p.out = raw(out);
  p.dout = raw(dout);
  p.lse_in = lse;
  p.dq = raw(dq);
  p.dk = raw(dk);
  p.dv = raw(dv);
  p.delta = delta;
  auto st = static_cast<cudaStream_t>(stream);
  if (s.hd == 64) backward<64>(st, s, p);
  else backward<128>(st, s, p);
}

}  // namespace shardrl::kernels
