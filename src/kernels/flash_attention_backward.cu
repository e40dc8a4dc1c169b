// Tensor-core attention, backward (interface: flash_attention.hpp; the shared pieces and the
// design: flash_attention_tiles.cuh). Three launches, no atomics, so every sum has a fixed
// order: D = rowsum(dO * O) per (token, head); dK and dV per key tile of a kv head, over the
// group's query heads and the query tiles that see the keys; dQ per query tile, which computes
// the scores a second time (7 tile products in all, against FlashAttention-2's 5 with atomics).
#include "kernels/flash_attention_tiles.cuh"

#include <algorithm>

namespace shardrl::kernels {
namespace flash {
namespace {

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
  const Tile<HD> tq{smem_addr(base)}, tdo{smem_addr(base + BM * HD)};   // then K and V in two stages each

  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;
  const int h = blockIdx.y, b = blockIdx.z, g = h / (p.H / p.G);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long tok0 = static_cast<long>(b) * p.S;
  const std::int32_t* pos = p.positions + tok0;
  const long q_ld = static_cast<long>(p.H) * HD;
  const KeyValueStream<HD, BN> kv = key_value_stream<HD, BN>(p, smem_addr(base + 2 * BM * HD), tok0, g);

  const int q_valid = min(BM, p.S - m0);
  const int t_begin = (m0 - pos[m0]) / BN, t_end = (m0 + q_valid + BN - 1) / BN;
  const long qoff = (tok0 + m0) * q_ld + static_cast<long>(h) * HD;
  tq.template fetch<BM>(p.q + qoff, q_ld, q_valid);
  tdo.template fetch<BM>(p.dout + qoff, q_ld, q_valid);
  kv.fetch(t_begin, 0);
  cp_async_commit();

  const WarpRows rows(pos, p.S, m0 + warp * 16);
  float lse_log2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool ok = rows.row[r] < p.S;
    const long at = (tok0 + rows.row[r]) * p.H + h;
    lse_log2[r] = ok ? p.lse_in[at] * kLog2e : 0.0f;
    delta[r] = ok ? p.delta[at] : 0.0f;
  }
  const float scale_log2 = p.scale * kLog2e;

  std::uint32_t qf[HD / 16][4], dof[HD / 16][4];
  float dq[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) & 1;
    kv.advance(t, t_end, stage);
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
      mma_rows<BN / 16>(s, qf[kk], kv.keys(stage), kk * 16);
      mma_rows<BN / 16>(dp, dof[kk], kv.values(stage), kk * 16);
    }
    // dS = P (dP - D); the mask only where the tile crosses some row's window
    const int n0 = t * BN;
    const bool unmasked = rows.window_holds(n0, BN);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pr = fast_exp2(fmaf(s[j][e], scale_log2, -lse_log2[r]));
        if (!unmasked && !rows.sees(r, n0 + 8 * j + 2 * (lane & 3) + (e & 1))) pr = 0.0f;
        s[j][e] = pr * (dp[j][e] - delta[r]);
      }
    // dQ += dS K
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      std::uint32_t da[4];
      c_to_a(da, s[2 * kk], s[2 * kk + 1]);
      mma_columns(dq, da, kv.keys(stage), kk * 16);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows.row[r] >= p.S) continue;
    bf16_t* qrow = p.dq + (tok0 + rows.row[r]) * q_ld + static_cast<long>(h) * HD;
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
      *reinterpret_cast<std::uint32_t*>(qrow + 8 * d + 2 * (lane & 3)) =
          pack_bf16(dq[d][2 * r] * p.scale, dq[d][2 * r + 1] * p.scale);
  }
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

}  // namespace
}  // namespace flash

void flash_attention_backward(void* stream, const AttentionShape& s, const std::int32_t* positions, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* out, const float* lse, const bf16* dout,
                              bf16* dq, bf16* dk, bf16* dv, float* delta) {
  flash::check_shape(s, positions);
  flash::Params p = flash::make_params(s, positions);
  p.q = flash::raw(q);
  p.k = flash::raw(k);
  p.v = flash::raw(v);
  p.out = flash::raw(out);
  p.dout = flash::raw(dout);
  p.lse_in = lse;
  p.dq = flash::raw(dq);
  p.dk = flash::raw(dk);
  p.dv = flash::raw(dv);
  p.delta = delta;
  auto st = static_cast<cudaStream_t>(stream);
  if (s.hd == 64) flash::backward<64>(st, s, p);
  else flash::backward<128>(st, s, p);
}

}  // namespace shardrl::kernels
