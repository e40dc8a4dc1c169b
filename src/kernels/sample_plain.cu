// The plain draw on the GPU (kernels/sample_plain.hpp; the steps of rollout/sampling_impl.hpp's
// sample_plain_by_teams): one launch of a CTA per chunk of a row's vocabulary, the row's last CTA
// to finish picking.
//
// Why a CUDA-only kernel: the draw runs once a decode step on a few hundred KB of logits (19 MB
// at 64 rows of a 152K vocabulary), and Kokkos' team reductions, scans and single-thread sections
// kept it latency-bound: 30 us of a 0.8 ms qwen3-0.6b step at batch 1 and 70 us at 64 rows on an
// H200 (three launches; one Kokkos launch was no faster). Here a thread holds 8 of its chunk's
// tokens from one 16-byte load, so the chunk's maximum, mass and moment take one read and warp
// shuffles, and the launch is a dependent one: its CTAs are resident when the head's product
// ends.
//
// Every sum has a fixed order (lane 0's shuffle tree, then the warps in order, then the chunks
// in order), so a draw is deterministic: decode graphs and eager steps draw the same tokens.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "kernels/bf16_unpack.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/sample_plain.hpp"

namespace shardrl::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = kSampleChunkTokens / kThreads;   // tokens a thread: one 16-byte load of bf16
static_assert(kPer == 8, "a thread's tokens are one 16-byte load of bf16");
// The row's chunks in shared memory (maximum, mass, moment, scale: 16 bytes a chunk), within the
// 48 KiB a launch may ask for without opting in, less the kernel's own 1 KiB at most:
// vocabularies up to 6M tokens.
constexpr int kMaxChunks = (48 * 1024 - 1024) / 16;

template <class T>
struct DrawParams {
  const T* logits;   // (R, V); T: the bits of bf16 (std::uint16_t) or float
  const std::uint64_t* keys;
  float temperature;
  std::int32_t* token;
  float* logp;
  float* entropy;
  int V, C;
  float* scratch;
};

// Thread t's tokens of a chunk of n at p, [t * kPer, t * kPer + kPer), as float; past n, -inf
// (no weight).
__device__ inline void load_tokens(const std::uint16_t* p, int n, float (&x)[kPer]) {
  const int first = threadIdx.x * kPer;
  if (first + kPer <= n && (reinterpret_cast<std::uintptr_t>(p + first) & 15) == 0) {
    unpack8(*reinterpret_cast<const uint4*>(p + first), x);
    return;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    x[i] = first + i < n ? __uint_as_float(static_cast<std::uint32_t>(p[first + i]) << 16) : -INFINITY;
}
__device__ inline void load_tokens(const float* p, int n, float (&x)[kPer]) {
  const int first = threadIdx.x * kPer;
  if (first + kPer <= n && (reinterpret_cast<std::uintptr_t>(p + first) & 15) == 0) {
    const float4 a = reinterpret_cast<const float4*>(p + first)[0], b = reinterpret_cast<const float4*>(p + first)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    return;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) x[i] = first + i < n ? p[first + i] : -INFINITY;
}

__device__ inline float larger(float a, float b) { return fmaxf(a, b); }   // NaN values are passed over
__device__ inline int larger(int a, int b) { return max(a, b); }

// The CTA's largest v, the same on every thread.
template <class T>
__device__ inline T block_max(T v, T* shared) {
  for (int o = 16; o > 0; o /= 2) v = larger(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  v = shared[0];
  for (int w = 1; w < kWarps; ++w) v = larger(v, shared[w]);
  __syncthreads();   // before `shared` is written again
  return v;
}

// The CTA's sums of a and b: each warp's by lane 0's tree, then the warps' in order; the same on
// every thread.
__device__ inline void block_sum2(float& a, float& b, float* shared) {
  for (int o = 16; o > 0; o /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  if (threadIdx.x % 32 == 0) {
    shared[2 * (threadIdx.x / 32)] = a;
    shared[2 * (threadIdx.x / 32) + 1] = b;
  }
  __syncthreads();
  a = 0.0f, b = 0.0f;
  for (int w = 0; w < kWarps; ++w) a += shared[2 * w], b += shared[2 * w + 1];
  __syncthreads();
}

// The sum of v over the threads before this one (in thread order), the same bits whichever
// thread asks: each warp's inclusive scan, then the warps' totals before it in order.
__device__ inline float exclusive_prefix(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float inclusive = v;
  for (int o = 1; o < 32; o *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  float within = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) within = 0.0f;
  if (lane == 31) shared[warp] = inclusive;
  __syncthreads();
  float before = 0.0f;
  for (int w = 0; w < warp; ++w) before += shared[w];
  __syncthreads();
  return before + within;
}

template <class T>
__global__ void __launch_bounds__(kThreads) sample_plain_kernel(DrawParams<T> p) {
  __shared__ float reduce[2 * kWarps];
  __shared__ int reduce_int[kWarps];
  __shared__ int last_done;
  __shared__ float picked[3];   // the row's mass and moment, and the chosen chunk's lower bound
  __shared__ int picked_chunk;
  extern __shared__ float row_chunks[];   // 4 C: the chunks' maximum, mass, moment; their scales
  const int C = p.C, r = blockIdx.x / C, c = blockIdx.x % C;
  const float t = p.temperature;
  // The logits are the head's product, the kernel before: nothing is read before this.
  wait_for_prerequisites();

  // This chunk's maximum, mass and moment under it, from the thread's tokens in registers.
  const int n = min(kSampleChunkTokens, p.V - c * kSampleChunkTokens);
  const T* row_logits = p.logits + static_cast<long>(r) * p.V;
  float x[kPer];
  load_tokens(row_logits + static_cast<long>(c) * kSampleChunkTokens, n, x);
  float m = -INFINITY;
  int nan = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) m = fmaxf(m, x[i]), nan |= x[i] != x[i];
  m = block_max(m, reduce);
  // A chunk with a NaN logit (a diverged model) has NaN for its maximum and sums, which the row's
  // then carry into the recorded log-probability; one whose logits are all -inf has no mass.
  if (__syncthreads_or(nan)) m = NAN;
  float mass = m != m ? NAN : 0.0f, moment = mass;
  if (m > -INFINITY) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const float s = (x[i] - m) / t;
      const float e = expf(s);
      mass += e;
      if (e > 0.0f) moment += e * s;   // a logit of -inf (or a place past n) adds 0, not 0 * -inf
    }
  }
  block_sum2(mass, moment, reduce);
  float* row = p.scratch + sample_row_scratch(C, r);
  unsigned int* done = reinterpret_cast<unsigned int*>(row + 3L * C);
  if (threadIdx.x == 0) {
    row[3 * c] = m;
    row[3 * c + 1] = mass;
    row[3 * c + 2] = moment;
    __threadfence();   // the sums are out before the count says so
    last_done = atomicAdd(done, 1u) == static_cast<unsigned int>(C - 1) ? 1 : 0;
  }
  __syncthreads();
  if (!last_done) return;

  // The row's last CTA: its chunks (written by other CTAs, read from L2), each one's scale to the
  // row's maximum M (kernels/sample_plain.hpp's row_mass_moment), the row's sums and the chunk
  // where the target falls.
  __threadfence();
  float* chunk = row_chunks;
  float* scale = row_chunks + 3 * C;
  for (int i = threadIdx.x; i < 3 * C; i += kThreads) chunk[i] = __ldcg(row + i);
  if (threadIdx.x == 0) *done = 0u;   // for the next draw (a later launch)
  __syncthreads();
  float M = -INFINITY;
  for (int i = threadIdx.x; i < C; i += kThreads) M = fmaxf(M, chunk[3 * i]);
  M = block_max(M, reduce);
  for (int i = threadIdx.x; i < C; i += kThreads)
    scale[i] = chunk_scale(chunk[3 * i], M, t);
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f, total_moment = 0.0f;
    row_mass_moment(C, chunk, scale, M, t, total, total_moment);
    const ChunkPick pick = pick_chunk(C, chunk, scale, uniform01(p.keys[r]) * total);
    picked[0] = total, picked[1] = total_moment, picked[2] = pick.before;
    picked_chunk = pick.at;
    if (pick.at < 0) {   // no chunk has mass: logits all NaN (a diverged model)
      p.token[r] = -1;
      p.logp[r] = p.entropy[r] = NAN;
    }
  }
  __syncthreads();
  const int at = picked_chunk;
  if (at < 0) return;
  const float total = picked[0], before = picked[2];
  const float target = uniform01(p.keys[r]) * total;

  // The inverse CDF within the chunk (kernels' inverse_cdf in rollout/sampling_impl.hpp): each
  // thread's 8 tokens are a block; the block is the last one with weight whose lower bound,
  // before + the blocks' prefix, is at or below the target (lower bounds alone: upper bounds
  // rounded from other sums leave gaps and overlaps of an ulp); its thread walks it.
  const int n_at = min(kSampleChunkTokens, p.V - at * kSampleChunkTokens);
  const int first = threadIdx.x * kPer;
  load_tokens(row_logits + static_cast<long>(at) * kSampleChunkTokens, n_at, x);
  // A token's weight as its chunk's mass summed it, scaled as the chunk was: the walk's sums and
  // the chunk's weight differ by rounding only.
  const float at_max = chunk[3 * at], at_scale = scale[at];
  float w[kPer], block = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    w[i] = x[i] > -INFINITY ? at_scale * expf((x[i] - at_max) / t) : 0.0f;
    block += w[i];
  }
  const float lower = before + exclusive_prefix(block, reduce);
  const int chosen_block =
      block_max(block > 0.0f && lower <= target ? static_cast<int>(threadIdx.x) : -1, reduce_int);
  if (static_cast<int>(threadIdx.x) == chosen_block) {
    // The walk sums the block's weights from 0 against the target's distance past its lower
    // bound: summed onto the bound, a weight under half its ulp never moved the sum (behind a
    // dominant token, every token 16.6 or more below it at t = 1), and such a block had no pick.
    const float rest = target - lower;
    float run = 0.0f, logit = 0.0f, kept_logit = 0.0f, any_logit = 0.0f;
    int pick = -1, last_kept = -1, any = -1;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (pick >= 0 || w[i] <= 0.0f) continue;
      any = i, any_logit = x[i];
      // Only a token whose weight still moves the running sum from the bound is taken: not one of
      // weight e^-60 at the chunk's end (the fallback past the block's end, rounding) nor at the
      // block's start (a target on the bound itself).
      const bool moves = lower + (run + w[i]) > lower + run;
      if (moves) last_kept = i, kept_logit = x[i];
      if (moves && rest < run + w[i]) pick = i, logit = x[i];
      run += w[i];
    }
    if (pick < 0) pick = last_kept, logit = kept_logit;
    if (pick < 0) pick = any, logit = any_logit;   // the block has weight: some token has
    p.token[r] = at * kSampleChunkTokens + first + pick;
    record_draw(logit, M, t, total, picked[1], p.logp[r], p.entropy[r]);
  }
  if (chosen_block >= 0) return;
  // No block of the chunk has weight (a guard: its maximum's token has the chunk's scale as its
  // weight): its last token with weight, or its last token.
  int mine = -1;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (w[i] > 0.0f) mine = first + i;
  const int last_token = block_max(mine, reduce_int);
  const int v = last_token >= 0 ? last_token : n_at - 1;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (first + i == v) {
      p.token[r] = at * kSampleChunkTokens + v;
      record_draw(x[i], M, t, total, picked[1], p.logp[r], p.entropy[r]);
    }
}

template <class T>
void launch(void* stream, const T* logits, const std::uint64_t* keys, float temperature, std::int32_t* token,
            float* logp, float* entropy, int R, int V, float* scratch) {
  if (R <= 0) return;
  const int C = sample_chunks(V);
  SHARDRL_CHECK(C <= kMaxChunks, "a vocabulary too large for the draw's shared memory");
  SHARDRL_CHECK(static_cast<long>(R) * C < (1L << 31), "too many rows x chunks for one launch");
  const DrawParams<T> p{logits, keys, temperature, token, logp, entropy, V, C, scratch};
  static const bool early = dependent_launch_compiled(reinterpret_cast<const void*>(sample_plain_kernel<T>));
  launch_maybe_early(sample_plain_kernel<T>, early, dim3(static_cast<unsigned>(R * C)), dim3(kThreads),
                     4 * static_cast<std::size_t>(C) * sizeof(float), static_cast<cudaStream_t>(stream), p);
}

}  // namespace

void sample_plain_cuda(void* stream, const bf16* logits, const std::uint64_t* keys, float temperature,
                       std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch) {
  launch(stream, reinterpret_cast<const std::uint16_t*>(logits), keys, temperature, token, logp, entropy, R, V,
         scratch);
}

void sample_plain_cuda(void* stream, const float* logits, const std::uint64_t* keys, float temperature,
                       std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch) {
  launch(stream, logits, keys, temperature, token, logp, entropy, R, V, scratch);
}

}  // namespace shardrl::kernels
