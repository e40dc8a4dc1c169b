// Tensor-core attention, forward (interface: flash_attention.hpp; the shared pieces and the
// design: flash_attention_tiles.cuh). One CTA per (64 query rows, head, row of tokens), the
// longest tiles launched first; online softmax over the key tiles the rows see.
#include "kernels/flash_attention_tiles.cuh"

namespace shardrl::kernels {
namespace flash {
namespace {

template <int HD, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) flash_forward_kernel(Params p) {
  constexpr int BM = WARPS * 16, BN = 64;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* sq = reinterpret_cast<bf16_t*>(smem);   // Q, then K and V in two stages each
  const Tile<HD> tq{smem_addr(sq)};

  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;   // the longest tiles first
  const int h = blockIdx.y, b = blockIdx.z, g = h / (p.H / p.G);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long tok0 = static_cast<long>(b) * p.S;
  const std::int32_t* pos = p.positions + tok0;
  const long q_ld = static_cast<long>(p.H) * HD;
  const KeyValueStream<HD, BN> kv = key_value_stream<HD, BN>(p, smem_addr(sq + BM * HD), tok0, g);

  const int q_valid = min(BM, p.S - m0);
  const int t_begin = (m0 - pos[m0]) / BN, t_end = (m0 + q_valid + BN - 1) / BN;
  tq.template fetch<BM>(p.q + (tok0 + m0) * q_ld + static_cast<long>(h) * HD, q_ld, q_valid);
  kv.fetch(t_begin, 0);
  cp_async_commit();
  const WarpRows rows(pos, p.S, m0 + warp * 16);

  std::uint32_t qf[HD / 16][4];
  float o[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const float scale_log2 = p.scale * kLog2e;

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) & 1;
    kv.advance(t, t_end, stage);
    if (t == t_begin) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) tq.load_a(qf[kk], warp * 16, kk * 16);
    }

    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) mma_rows<BN / 16>(s, qf[kk], kv.keys(stage), kk * 16);

    // Raw scores: the scale (> 0) commutes with the max, and goes into one FMA with the exponent.
    const int n0 = t * BN;
    if (!rows.window_holds(n0, BN)) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!rows.sees(e >> 1, n0 + 8 * j + 2 * (lane & 3) + (e & 1))) s[j][e] = -INFINITY;
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
      mma_columns(o, pa, kv.values(stage), kk * 16);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = rows.row[r];
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

template <int HD>
void forward(cudaStream_t stream, const AttentionShape& s, const Params& p) {
  constexpr int W = Tiles<HD>::kWarps, BM = W * 16, BN = 64;
  const dim3 grid((s.S + BM - 1) / BM, s.n_heads, s.B);
  launch(flash_forward_kernel<HD, W>, grid, W * 32, (BM + 4 * BN) * HD * sizeof(bf16_t), stream, p);
}

}  // namespace
}  // namespace flash

bool flash_attention_available() { return true; }

void flash_attention_forward(void* stream, const AttentionShape& s, const std::int32_t* positions, const bf16* q,
                             const bf16* k, const bf16* v, bf16* out, float* lse) {
  flash::check_shape(s, positions);
  flash::Params p = flash::make_params(s, positions);
  p.q = flash::raw(q);
  p.k = flash::raw(k);
  p.v = flash::raw(v);
  p.o = flash::raw(out);
  p.lse = lse;
  auto st = static_cast<cudaStream_t>(stream);
  if (s.hd == 64) flash::forward<64>(st, s, p);
  else flash::forward<128>(st, s, p);
}

}  // namespace shardrl::kernels
