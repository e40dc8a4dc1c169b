// Decode attention on the GPU (interface and why: attention_decode_cuda.hpp).
//
// One CTA of kWarps warps per (row, KV head g, chunk of GROUP <= 4 of g's query heads). A cache entry
// of one head is HD bf16 = HD / 8 16-byte pieces: LANES = HD / 8 lanes read one position, so a
// warp reads 32 / LANES positions per load and kUnroll loads in flight per lane (keys and values
// together). Lane (sub, piece) keeps, for its GROUP query heads, the 8 dimensions of its piece of
// the query (scaled) and of the output, and an online softmax (max, sum) of the positions of its
// sub-stream: positions base + u * PER_LOAD + sub, base stepping by the CTA's whole tile. The
// scores are reduced over the LANES lanes of a position by shuffles. At the end the CTA's
// sub-streams (kWarps * PER_LOAD of them) are merged through shared memory in a fixed order: the
// kernel is deterministic, so decode graphs and eager steps draw the same tokens.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/bf16_unpack.cuh"
#include "kernels/attention_decode_cuda.hpp"

namespace shardrl::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct DecodeParams {
  CacheShape s;
  const std::int32_t* slots;
  const std::int32_t* positions;
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  __nv_bfloat16* out;
  float scale_log2;   // 1/sqrt(hd) * log2(e): the scores go to exp2
};

template <int HD, int GROUP>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(DecodeParams p) {
  constexpr int LANES = HD / 8;              // lanes reading one position
  constexpr int PER_LOAD = 32 / LANES;       // positions a warp reads per load
  constexpr int STREAMS = kWarps * PER_LOAD;  // online softmaxes of the CTA
  constexpr int TILE = STREAMS * kUnroll;    // positions the CTA reads per iteration

  const int r = blockIdx.x;
  const int G = p.s.n_kv_heads, H = p.s.n_heads, group = H / G;
  const int chunks = group / GROUP;
  const int g = blockIdx.y / chunks, h0 = g * group + (blockIdx.y % chunks) * GROUP;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane / LANES, piece = lane % LANES;
  const int stream = warp * PER_LOAD + sub;
  const long seq = p.slots ? p.slots[r] : r;
  const long last = p.positions[r];

  float q[GROUP][8], acc[GROUP][8], m[GROUP], l[GROUP];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p.q + (static_cast<long>(r) * H + h0 + h) * HD + piece * 8);
    unpack8(raw, q[h]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      q[h][i] *= p.scale_log2;
      acc[h][i] = 0.0f;
    }
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }

  const long head_offset = static_cast<long>(g) * HD + piece * 8;
  // The trip count is the warp's (its first position of the tile), not the lane's: the shuffles
  // need every lane; a lane whose positions all lie past `last` scores them -inf.
  for (long tile = 0; tile * TILE + warp * PER_LOAD <= last; ++tile) {
    const long base = tile * TILE + stream;
    uint4 kraw[kUnroll], vraw[kUnroll];
    // Every load of the tile issued before any is used: kUnroll keys and values in flight.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long j = base + static_cast<long>(u) * STREAMS;
      if (j <= last) {
        const long at = p.s.entry(seq, j) * G * HD + head_offset;
        kraw[u] = *reinterpret_cast<const uint4*>(p.k + at);
        vraw[u] = *reinterpret_cast<const uint4*>(p.v + at);
      } else {
        kraw[u] = vraw[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[kUnroll][GROUP];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      unpack8(kraw[u], kf);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[h][i], kf[i], dot);
        // The LANES lanes of one position are aligned, so xor offsets below LANES stay inside.
#pragma unroll
        for (int o = LANES / 2; o >= 1; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[u][h] = base + static_cast<long>(u) * STREAMS <= last ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[u][h]);
      // A stream that has seen no position yet keeps m = -inf, l = 0, acc = 0: exponents taken
      // against 0 then, not against -inf (which would give NaN).
      const float ref = mx == -INFINITY ? 0.0f : mx;
      const float correction = exp2f(m[h] - ref);   // 0 while m = -inf
      m[h] = mx;
      l[h] *= correction;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] *= correction;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) s[u][h] = exp2f(s[u][h] - ref);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[8];
      unpack8(vraw[u], vf);
#pragma unroll
      for (int h = 0; h < GROUP; ++h) {
        l[h] += s[u][h];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] = fmaf(s[u][h], vf[i], acc[h][i]);
      }
    }
  }

  // Merge the CTA's streams: each output (h, d) sums its streams in stream order.
  __shared__ float sm_m[STREAMS][GROUP], sm_l[STREAMS][GROUP];
  __shared__ float sm_acc[STREAMS][GROUP][HD];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    if (piece == 0) {
      sm_m[stream][h] = m[h];
      sm_l[stream][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_acc[stream][h][piece * 8 + i] = acc[h][i];
  }
  __syncthreads();
  for (int o = threadIdx.x; o < GROUP * HD; o += kWarps * 32) {
    const int h = o / HD, d = o % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < STREAMS; ++t) mx = fmaxf(mx, sm_m[t][h]);
    float sum = 0.0f, value = 0.0f;
#pragma unroll
    for (int t = 0; t < STREAMS; ++t) {
      // mx is finite (stream 0 holds position 0); w = 0 for a stream that saw no position.
      const float w = exp2f(sm_m[t][h] - mx);
      sum = fmaf(sm_l[t][h], w, sum);
      value = fmaf(sm_acc[t][h][d], w, value);
    }
    p.out[(static_cast<long>(r) * H + h0 + h) * HD + d] = __float2bfloat16_rn(value / sum);
  }
}

template <int HD, int GROUP>
void launch(cudaStream_t stream, const DecodeParams& p) {
  const int group = p.s.n_heads / p.s.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(p.s.rows), static_cast<unsigned>(p.s.n_kv_heads * (group / GROUP)));
  decode_attention_kernel<HD, GROUP><<<grid, kWarps * 32, 0, stream>>>(p);
  SHARDRL_CHECK_CUDA(cudaGetLastError());
}

// The widest chunk of query heads (4, 2 or 1) that divides the group: the chunk's queries and
// outputs live in registers (8 heads took 251 registers a thread, 4 take 159).
template <int HD>
void launch_for_group(cudaStream_t stream, const DecodeParams& p) {
  const int group = p.s.n_heads / p.s.n_kv_heads;
  if (group % 4 == 0) return launch<HD, 4>(stream, p);
  if (group % 2 == 0) return launch<HD, 2>(stream, p);
  launch<HD, 1>(stream, p);
}

}  // namespace

bool attention_decode_cuda_supports(const CacheShape& s) {
  return (s.hd == 64 || s.hd == 128) && s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0;
}

void attention_decode_cuda(void* stream, const CacheShape& s, const std::int32_t* slots,
                           const std::int32_t* positions, const bf16* q, const bf16* k_cache,
                           const bf16* v_cache, bf16* out) {
  SHARDRL_CHECK(attention_decode_cuda_supports(s), "attention_decode_cuda: unsupported shape (head dim 64 or 128, "
                                                   "n_heads a multiple of n_kv_heads)");
  if (s.rows == 0) return;
  const DecodeParams p{s,
                       slots,
                       positions,
                       reinterpret_cast<const __nv_bfloat16*>(q),
                       reinterpret_cast<const __nv_bfloat16*>(k_cache),
                       reinterpret_cast<const __nv_bfloat16*>(v_cache),
                       reinterpret_cast<__nv_bfloat16*>(out),
                       kLog2e / std::sqrt(static_cast<float>(s.hd))};
  const auto st = static_cast<cudaStream_t>(stream);
  if (s.hd == 64) return launch_for_group<64>(st, p);
  launch_for_group<128>(st, p);
}

}  // namespace shardrl::kernels
