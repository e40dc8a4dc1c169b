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
//
// The HEADS form (attention_decode_heads_cuda) first forms the CTA's query heads from the raw
// products (norm, rotation) into shared memory, and where the CTA takes the row's last range,
// the new key and value too; it reads them from there, and one CTA of the (row, KV head) writes
// them into the cache for the steps after. No other CTA reads that entry in this launch. In steps
// of a few rows that form is a dependent launch: its CTAs may start, and load their first tile of
// the cache, while the product of q, k and v before it still runs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/bf16_unpack.cuh"
#include "kernels/attention_decode_cuda.hpp"
#include "kernels/dependent_launch.cuh"

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
  // Split over the sequence (attention_decode_cuda.hpp), or nullptr: each CTA takes its row's
  // whole cache. partials: (rows, n_heads, kDecodeSplitMaxRanges, 2 + HD) of (max, sum,
  // unnormalised output); arrivals: (rows, gridDim.y) counters, zero between launches.
  float* partials;
  std::uint32_t* arrivals;
  // The HEADS form's inputs (DecodeHeads), and the cache again, writable.
  const __nv_bfloat16* q_raw;
  const __nv_bfloat16* k_raw;
  const __nv_bfloat16* v_new;
  long q_stride, kv_stride;
  const __nv_bfloat16* q_norm;
  const __nv_bfloat16* k_norm;
  float eps;
  const float* table;
  __nv_bfloat16* k_cache;
  __nv_bfloat16* v_cache;
};

// One head of the new token as qk_rope_cache_write forms it, into `out` (shared memory): with
// norm weights w, normalised (the sum of squares over the warp's lanes, then a butterfly) and
// rounded as rmsnorm_forward rounds; then rotated as rope_forward rotates, by the row's `table`.
// Every lane of the warp calls it; lane l takes the pairs (i, i + HD/2) for i = l, l + 32, ...
template <int HD>
__device__ inline void form_head(const __nv_bfloat16* x, const __nv_bfloat16* w, float eps, const float* table,
                                 __nv_bfloat16* out, int lane) {
  constexpr int HALF = HD / 2, PAIRS = HALF / 32;
  float a[PAIRS], b[PAIRS];
#pragma unroll
  for (int t = 0; t < PAIRS; ++t) {
    a[t] = __bfloat162float(x[lane + 32 * t]);
    b[t] = __bfloat162float(x[lane + 32 * t + HALF]);
  }
  if (w != nullptr) {
    float sum_sq = 0.0f;
#pragma unroll
    for (int t = 0; t < PAIRS; ++t) sum_sq += a[t] * a[t] + b[t] * b[t];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    const float scale = 1.0f / sqrtf(sum_sq / static_cast<float>(HD) + eps);   // detail::rmsnorm_scale
#pragma unroll
    for (int t = 0; t < PAIRS; ++t) {   // detail::rmsnorm_element
      const int i = lane + 32 * t;
      a[t] = __bfloat162float(__float2bfloat16_rn(a[t] * scale * __bfloat162float(w[i])));
      b[t] = __bfloat162float(__float2bfloat16_rn(b[t] * scale * __bfloat162float(w[i + HALF])));
    }
  }
#pragma unroll
  for (int t = 0; t < PAIRS; ++t) {   // detail::rotate_pair
    const int i = lane + 32 * t;
    const float c = table[i], s = table[HALF + i];
    out[i] = __float2bfloat16_rn(a[t] * c - b[t] * s);
    out[i + HALF] = __float2bfloat16_rn(b[t] * c + a[t] * s);
  }
}

// The positions of each range of a row of `length` positions in a step of `rows` rows:
// kDecodeSplitPositions (kDecodeFewRowsSplitPositions for a longer row in a step of up to
// kDecodeFewRows rows), doubled until at most kDecodeSplitMaxRanges ranges cover the row. The
// kernel splits each row by it; the launcher sizes the grid by it for the longest row the cache
// holds (a CTA takes several ranges where a shorter row has more).
__host__ __device__ inline long split_span(long length, int rows) {
  long span = rows <= kDecodeFewRows && length > kDecodeSplitPositions ? kDecodeFewRowsSplitPositions
                                                                       : kDecodeSplitPositions;
  while ((length + span - 1) / span > kDecodeSplitMaxRanges) span *= 2;
  return span;
}

// The keys and values of a lane's positions base, base + step, ... (U of them) of a row's range
// ending at `end`; zero past it, and at `skip` (the HEADS form's new entry, from shared memory).
template <int U>
__device__ inline void load_positions(const DecodeParams& p, long seq, long head_offset, long base, long step,
                                      long end, long skip, uint4 (&kraw)[U], uint4 (&vraw)[U]) {
  const long width = static_cast<long>(p.s.n_kv_heads) * p.s.hd;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long j = base + u * step;
    if (j < end && j != skip) {
      const long at = p.s.entry(seq, j) * width + head_offset;
      kraw[u] = *reinterpret_cast<const uint4*>(p.k + at);
      vraw[u] = *reinterpret_cast<const uint4*>(p.v + at);
    } else {
      kraw[u] = vraw[u] = make_uint4(0, 0, 0, 0);
    }
  }
}

template <int HD, int GROUP, bool HEADS>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(DecodeParams p) {
  // o_proj's matrix-vector kernel after it may start now and load its weights
  // (kernels/decode_gemv_cuda.hpp, GemvWeights).
  allow_dependents();
  constexpr int LANES = HD / 8;              // lanes reading one position
  constexpr int PER_LOAD = 32 / LANES;       // positions a warp reads per load
  constexpr int STREAMS = kWarps * PER_LOAD;  // online softmaxes of the CTA
  constexpr int TILE = STREAMS * kUnroll;    // positions the CTA reads per iteration
  static_assert(kDecodeSplitPositions % TILE == 0 && kDecodeFewRowsSplitPositions % TILE == 0,
                "a range is whole tiles");

  const int r = blockIdx.x;
  const int G = p.s.n_kv_heads, H = p.s.n_heads, group = H / G;
  const int chunks = group / GROUP;
  const int g = blockIdx.y / chunks, h0 = g * group + (blockIdx.y % chunks) * GROUP;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane / LANES, piece = lane % LANES;
  const int stream = warp * PER_LOAD + sub;
  const long seq = p.slots ? p.slots[r] : r;
  // The row's ranges (one without a workspace): their bounds depend on the row's length and its
  // step's row class (split_span), never on the grid or the cache's capacity.
  const int length = p.positions[r] + 1;
  const int span = p.partials ? static_cast<int>(split_span(length, p.s.rows)) : length;
  const int splits = (length + span - 1) / span;
  const int last = length - 1;
  const long head_offset = static_cast<long>(g) * HD + piece * 8;

  // The CTA's first tile's loads go out first: they need neither the queries nor the new entry,
  // and what comes before the tile (the queries' loads, the HEADS form's prologue) runs while
  // they are in flight. Every load of a tile is issued before any is used: kUnroll keys and
  // values in flight.
  uint4 kraw[kUnroll], vraw[kUnroll];
  const long no_skip = HEADS ? last : -1;
  if (static_cast<int>(blockIdx.z) < splits)
    load_positions(p, seq, head_offset, static_cast<long>(blockIdx.z) * span + stream, STREAMS,
                   min(static_cast<int>(blockIdx.z) * span + span, length), no_skip, kraw, vraw);
  bool tile_loaded = true;
  // The HEADS form of a few rows is a dependent launch (kernels/dependent_launch.cuh): it may
  // start while the product of q, k and v before it runs. What it has read so far no kernel of the
  // step writes: the step's slots and positions and the block table (copied in before the step),
  // and the row's cached positions before the last (written by earlier steps; the new entry is
  // skipped, and the block a sample writes is its own). Everything after this reads what the
  // kernels before it wrote: their raw heads, the rotations, and the split's workspace the
  // previous layer's launch leaves zeroed. (A no-op for an ordinary launch.)
  wait_for_prerequisites();

  // HEADS: the CTA's query heads, and where it takes the row's last range (each CTA takes the
  // ranges blockIdx.z, + gridDim.z, ...), the new key and value.
  __shared__ __align__(16) __nv_bfloat16 sm_q[HEADS ? GROUP : 1][HD];
  __shared__ __align__(16) __nv_bfloat16 sm_new[2][HD];   // key, value
  if constexpr (HEADS) {
    const bool takes_last =
        static_cast<int>(blockIdx.z) < splits && (splits - 1 - static_cast<int>(blockIdx.z)) % gridDim.z == 0;
    const float* table = p.table + static_cast<long>(r) * HD;
    static_assert(GROUP <= kWarps, "a warp a query head");
    if (warp < GROUP)
      form_head<HD>(p.q_raw + r * p.q_stride + (h0 + warp) * HD, p.q_norm, p.eps, table, sm_q[warp], lane);
    if (takes_last && warp == GROUP % kWarps)   // the key: the first warp without a query head, or warp 0
      form_head<HD>(p.k_raw + r * p.kv_stride + g * HD, p.k_norm, p.eps, table, sm_new[0], lane);
    if (takes_last)
      for (int i = threadIdx.x; i < HD; i += kWarps * 32) sm_new[1][i] = p.v_new[r * p.kv_stride + g * HD + i];
    __syncthreads();
    // The cache keeps the new entry for the steps after this one: the (row, KV head)'s first
    // chunk of query heads writes it.
    if (takes_last && blockIdx.y % chunks == 0 && threadIdx.x < HD / 8) {
      const long at = p.s.entry(seq, last) * G * HD + static_cast<long>(g) * HD + threadIdx.x * 8;
      *reinterpret_cast<uint4*>(p.k_cache + at) = reinterpret_cast<const uint4*>(sm_new[0])[threadIdx.x];
      *reinterpret_cast<uint4*>(p.v_cache + at) = reinterpret_cast<const uint4*>(sm_new[1])[threadIdx.x];
    }
  }

  float q[GROUP][8];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    const uint4 raw = HEADS ? reinterpret_cast<const uint4*>(sm_q[h])[piece]
                            : *reinterpret_cast<const uint4*>(p.q + (static_cast<long>(r) * H + h0 + h) * HD + piece * 8);
    unpack8(raw, q[h]);
#pragma unroll
    for (int i = 0; i < 8; ++i) q[h][i] *= p.scale_log2;
  }

  __shared__ float sm_m[STREAMS][GROUP], sm_l[STREAMS][GROUP];
  __shared__ float sm_acc[STREAMS][GROUP][HD];
  __shared__ bool sm_merges;

  for (int split = blockIdx.z; split < splits; split += gridDim.z) {
    const int begin = split * span, end = min(begin + span, length);
    float acc[GROUP][8], m[GROUP], l[GROUP];
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;
      m[h] = -INFINITY;
      l[h] = 0.0f;
    }
    // The trip count is the warp's (its first position of the tile), not the lane's: the
    // shuffles need every lane; a lane whose positions all lie past the split scores them -inf.
    for (long t0 = begin; t0 + warp * PER_LOAD < end; t0 += TILE) {
      const long base = t0 + stream;
      if (!tile_loaded) load_positions(p, seq, head_offset, base, STREAMS, end, no_skip, kraw, vraw);
      tile_loaded = false;
      if constexpr (HEADS) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + static_cast<long>(u) * STREAMS == last) {
            kraw[u] = reinterpret_cast<const uint4*>(sm_new[0])[piece];
            vraw[u] = reinterpret_cast<const uint4*>(sm_new[1])[piece];
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
          s[u][h] = base + static_cast<long>(u) * STREAMS < end ? dot : -INFINITY;
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

    tile_loaded = false;   // a warp with no position in this range did not use the first tile

    // Merge the CTA's streams: each output (h, d) sums its streams in stream order.
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
        // mx is finite (stream 0 holds the split's first position); w = 0 for a stream that
        // saw no position.
        const float w = exp2f(sm_m[t][h] - mx);
        sum = fmaf(sm_l[t][h], w, sum);
        value = fmaf(sm_acc[t][h][d], w, value);
      }
      const long out_at = (static_cast<long>(r) * H + h0 + h) * HD + d;
      if (splits == 1) {
        p.out[out_at] = __float2bfloat16_rn(value / sum);
      } else {
        float* part = p.partials + ((static_cast<long>(r) * H + h0 + h) * kDecodeSplitMaxRanges + split) * (2 + HD);
        if (d == 0) {
          part[0] = mx;
          part[1] = sum;
        }
        part[2 + d] = value;
      }
    }
    if (splits > 1) {
      // The CTA that completes the row's last split merges them all, in split order (the
      // kernel stays deterministic), and zeroes the counter for the next launch.
      // The barrier orders the CTA's partial writes before thread 0's fence, whose release is
      // cumulative: the merging CTA, after its own fence, sees them all.
      __syncthreads();
      std::uint32_t* arrived = p.arrivals + static_cast<long>(r) * gridDim.y + blockIdx.y;
      if (threadIdx.x == 0) {
        __threadfence();
        sm_merges = atomicAdd(arrived, 1u) == static_cast<std::uint32_t>(splits - 1);
        if (sm_merges) __threadfence();
      }
      __syncthreads();
      if (sm_merges) {
        for (int o = threadIdx.x; o < GROUP * HD; o += kWarps * 32) {
          const int h = o / HD, d = o % HD;
          const float* part = p.partials + (static_cast<long>(r) * H + h0 + h) * kDecodeSplitMaxRanges * (2 + HD);
          float mx = -INFINITY;
#pragma unroll 8
          for (int t = 0; t < splits; ++t) mx = fmaxf(mx, __ldcg(part + t * (2 + HD)));
          float sum = 0.0f, value = 0.0f;
#pragma unroll 8
          for (int t = 0; t < splits; ++t) {
            const float* pt = part + t * (2 + HD);
            const float w = exp2f(__ldcg(pt) - mx);
            sum = fmaf(__ldcg(pt + 1), w, sum);
            value = fmaf(__ldcg(pt + 2 + d), w, value);
          }
          p.out[(static_cast<long>(r) * H + h0 + h) * HD + d] = __float2bfloat16_rn(value / sum);
        }
        if (threadIdx.x == 0) *arrived = 0;
      }
    }
    __syncthreads();   // the shared arrays are the next split's
  }
}

// The CTAs a launch aims for when it splits a few rows' long caches: enough to keep every SM
// streaming (a CTA keeps 16 KiB of loads in flight, and about 2 MiB in flight reach the copy
// bandwidth).
int wanted_ctas() {
  static const int n = [] {
    int device = 0, sms = 0;
    SHARDRL_CHECK_CUDA(cudaGetDevice(&device));
    SHARDRL_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return 4 * sms;
  }();
  return n;
}

template <int HD, int GROUP, bool HEADS>
void launch(cudaStream_t stream, const DecodeParams& p) {
  const int group = p.s.n_heads / p.s.n_kv_heads;
  const int per_row = p.s.n_kv_heads * (group / GROUP);
  // CTAs per (row, head chunk): up to the ranges of the longest row the cache holds, fewer once
  // rows x chunks fill the GPU (each CTA then takes every gridDim.z-th range). Only the grid
  // depends on this, never a row's result.
  const long base_ctas = static_cast<long>(p.s.rows) * per_row;
  long ranges = 1;
  if (p.partials) {
    const long span = split_span(p.s.max_len, p.s.rows);
    ranges = std::min<long>((p.s.max_len + span - 1) / span, (wanted_ctas() + base_ctas - 1) / base_ctas);
  }
  const int z = static_cast<int>(ranges);
  const dim3 grid(static_cast<unsigned>(p.s.rows), static_cast<unsigned>(per_row), static_cast<unsigned>(z));
  // Only the HEADS form starts early (the other reads the new entry, which the launch before it
  // writes, in its first tile), and only in steps of up to kDecodeFewRows rows, whose q/k/v
  // product is the matrix-vector kernel that lets it start at once. On an H200 (session 37,
  // bench_decode, three runs each) that took qwen3-0.6b's decode steps at batch 1 from 0.804-0.820
  // to 0.790-0.792 ms; behind cuBLAS's product at 8 and 64 rows it gained nothing (qwen3-0.6b
  // 1.319-1.341 -> 1.345-1.354 ms at 8, 1.590-1.595 -> 1.598-1.613 at 64; llama-1b 1% either way).
  static const bool compiled =
      dependent_launch_compiled(reinterpret_cast<const void*>(decode_attention_kernel<HD, GROUP, HEADS>));
  const bool early = HEADS && compiled && p.s.rows <= kDecodeFewRows;
  launch_maybe_early(decode_attention_kernel<HD, GROUP, HEADS>, early, grid, dim3(kWarps * 32), 0, stream, p);
}

// The widest chunk of query heads (4, 2 or 1) that divides the group: the chunk's queries and
// outputs live in registers (8 heads took 251 registers a thread, 4 take 159).
template <int HD, bool HEADS>
void launch_for_group(cudaStream_t stream, const DecodeParams& p) {
  const int group = p.s.n_heads / p.s.n_kv_heads;
  if (group % 4 == 0) return launch<HD, 4, HEADS>(stream, p);
  if (group % 2 == 0) return launch<HD, 2, HEADS>(stream, p);
  launch<HD, 1, HEADS>(stream, p);
}

template <bool HEADS>
void launch_for_shape(cudaStream_t stream, const DecodeParams& p) {
  if (p.s.hd == 64) return launch_for_group<64, HEADS>(stream, p);
  launch_for_group<128, HEADS>(stream, p);
}

// The parameters common to both forms, HEADS's left empty.
DecodeParams params_for(const CacheShape& s, const std::int32_t* slots, const std::int32_t* positions,
                        const bf16* k_cache, const bf16* v_cache, bf16* out, const DecodeSplitWorkspace& split) {
  SHARDRL_CHECK(attention_decode_cuda_supports(s), "attention_decode_cuda: unsupported shape (head dim 64 or 128, "
                                                   "n_heads a multiple of n_kv_heads)");
  SHARDRL_CHECK((split.partials == nullptr) == (split.arrivals == nullptr),
                "attention_decode_cuda: a split workspace needs both its partials and its counters");
  // Steps of more than kDecodeSplitMaxRows rows fill the GPU without splitting.
  const bool splits = split.partials && s.rows <= kDecodeSplitMaxRows;
  DecodeParams p{};
  p.s = s;
  p.slots = slots;
  p.positions = positions;
  p.k = reinterpret_cast<const __nv_bfloat16*>(k_cache);
  p.v = reinterpret_cast<const __nv_bfloat16*>(v_cache);
  p.out = reinterpret_cast<__nv_bfloat16*>(out);
  p.scale_log2 = kLog2e / std::sqrt(static_cast<float>(s.hd));
  p.partials = splits ? split.partials : nullptr;
  p.arrivals = splits ? split.arrivals : nullptr;
  return p;
}

}  // namespace

void attention_decode_cuda(void* stream, const CacheShape& s, const std::int32_t* slots,
                           const std::int32_t* positions, const bf16* q, const bf16* k_cache,
                           const bf16* v_cache, bf16* out, const DecodeSplitWorkspace& split) {
  DecodeParams p = params_for(s, slots, positions, k_cache, v_cache, out, split);
  if (s.rows == 0) return;
  p.q = reinterpret_cast<const __nv_bfloat16*>(q);
  launch_for_shape<false>(static_cast<cudaStream_t>(stream), p);
}

void attention_decode_heads_cuda(void* stream, const CacheShape& s, const std::int32_t* slots,
                                 const std::int32_t* positions, const DecodeHeads& heads, bf16* k_cache,
                                 bf16* v_cache, bf16* out, const DecodeSplitWorkspace& split) {
  DecodeParams p = params_for(s, slots, positions, k_cache, v_cache, out, split);
  SHARDRL_CHECK((heads.q_norm == nullptr) == (heads.k_norm == nullptr),
                "attention_decode_heads_cuda: both norms or neither");
  SHARDRL_CHECK(heads.q_raw && heads.k_raw && heads.v && heads.table,
                "attention_decode_heads_cuda: the raw heads and the rotation table are needed");
  if (s.rows == 0) return;
  p.q_raw = reinterpret_cast<const __nv_bfloat16*>(heads.q_raw);
  p.k_raw = reinterpret_cast<const __nv_bfloat16*>(heads.k_raw);
  p.v_new = reinterpret_cast<const __nv_bfloat16*>(heads.v);
  p.q_stride = heads.q_stride > 0 ? heads.q_stride : static_cast<long>(s.n_heads) * s.hd;
  p.kv_stride = heads.kv_stride > 0 ? heads.kv_stride : static_cast<long>(s.n_kv_heads) * s.hd;
  p.q_norm = reinterpret_cast<const __nv_bfloat16*>(heads.q_norm);
  p.k_norm = reinterpret_cast<const __nv_bfloat16*>(heads.k_norm);
  p.eps = heads.eps;
  p.table = heads.table;
  p.k_cache = reinterpret_cast<__nv_bfloat16*>(k_cache);
  p.v_cache = reinterpret_cast<__nv_bfloat16*>(v_cache);
  launch_for_shape<true>(static_cast<cudaStream_t>(stream), p);
}

}  // namespace shardrl::kernels
