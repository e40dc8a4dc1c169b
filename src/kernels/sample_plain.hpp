// Plain sampling's parts that its two kernels share (a temperature, no top-k or top-p: what RL
// rollouts draw with; rollout/sampling.hpp draws with them): the chunks a row's vocabulary is
// split into, the scratch's layout, a key's uniform number and what a draw records. The Kokkos
// kernel (rollout/sampling_impl.hpp) runs on every build; GPU builds take the CUDA one
// (sample_plain.cu). Plain C++, no Kokkos and no CUDA types.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.hpp"

namespace shardrl {
struct bf16;   // core/bf16.hpp; only pointers here
}

namespace shardrl::kernels {

// A row's vocabulary goes in chunks of this many tokens, each reduced by its own team (CTA), so
// that a draw from a 152K vocabulary is not one team's passes over it (a latency-bound 0.23 ms
// at any batch up to the GPU's SM count, 1 ms at 512 rows). The chunks depend on V only: a row's
// draw is the same whatever the batch.
constexpr int kSampleChunkTokens = 2048;

SHARDRL_HOST_DEVICE int sample_chunks(int V) { return (V + kSampleChunkTokens - 1) / kSampleChunkTokens; }

// Row r's part of the scratch: each of its C chunks' maximum, mass and first moment, then the
// count of its chunks done (unsigned). The count is at the same place whatever the draw's rows,
// so that a draw of fewer rows never finds another's chunk sums there.
SHARDRL_HOST_DEVICE long sample_row_scratch(int C, int r) { return static_cast<long>(r) * (3L * C + 1); }

// Device floats a draw of R rows of V logits needs as scratch. It must be zero before its first
// draw (a fresh view is); every draw leaves the counts at zero again.
inline std::size_t sample_scratch_floats(int R, int V) {
  return static_cast<std::size_t>(sample_row_scratch(sample_chunks(V), R));
}

SHARDRL_HOST_DEVICE std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform number in [0, 1) from a key (24 random bits: exact in fp32).
SHARDRL_HOST_DEVICE float uniform01(std::uint64_t key) {
  return static_cast<float>(mix64(key) >> 40) * (1.0f / 16777216.0f);
}

// What a draw records of the tempered distribution it came from, as the train phase forms it
// (kernels/cross_entropy.hpp): log p = s - log(mass) for the drawn logit, and the entropy
// log(mass) - moment / mass, with s = (logit - max) / t, mass = sum e^s, moment = sum e^s s.
SHARDRL_HOST_DEVICE void record_draw(float logit, float max, float t, float mass, float moment, float& logp,
                                     float& entropy) {
  const float log_mass = logf(mass);
  logp = (logit - max) / t - log_mass;
  entropy = log_mass - moment / mass;
}

// A chunk's scale to its row's maximum, e^((m_c - max) / t): 0 for a chunk whose logits are all
// -inf (no mass), NaN for one with a NaN logit (its maximum NaN), which the row's sums carry.
SHARDRL_HOST_DEVICE float chunk_scale(float chunk_max, float max, float t) {
  if (chunk_max != chunk_max) return chunk_max;
  return chunk_max > -INFINITY ? expf((chunk_max - max) / t) : 0.0f;
}

// The row's last team, from its chunks' maximum, mass and moment (`chunk`, 3 C floats) and each
// chunk's scale to the row's maximum `max` (chunk_scale): the row's mass and moment under `max`,
// the chunks in order. A chunk's weight is its scale times its mass; its moment under `max` gains
// (m_c - max) / t per unit of mass.
SHARDRL_HOST_DEVICE void row_mass_moment(int C, const float* chunk, const float* scale, float max, float t,
                                         float& mass, float& moment) {
  mass = 0.0f, moment = 0.0f;
  for (int i = 0; i < C; ++i) {
    if (scale[i] == 0.0f) continue;
    mass += scale[i] * chunk[3 * i + 1];
    moment += scale[i] * (chunk[3 * i + 2] + (chunk[3 * i] - max) / t * chunk[3 * i + 1]);
  }
}

// The chunk where `target` (in [0, the row's mass)) falls, the chunks' weights summed in order,
// and its lower bound; if rounding leaves the target past the end, the last chunk with weight.
// `at` < 0: no chunk has weight (every logit NaN: a diverged model).
struct ChunkPick {
  int at = -1;
  float before = 0.0f;
};
SHARDRL_HOST_DEVICE ChunkPick pick_chunk(int C, const float* chunk, const float* scale, float target) {
  ChunkPick pick, last;
  float run = 0.0f;
  for (int i = 0; i < C; ++i) {
    const float w = scale[i] * chunk[3 * i + 1];
    if (w > 0.0f) {
      last = {i, run};
      if (pick.at < 0 && run <= target && target < run + w) pick = {i, run};
    }
    run += w;
  }
  return pick.at >= 0 ? pick : last;
}

// The plain draw of R rows in one launch on `stream` (the execution space's cudaStream_t), as
// sample_tokens defines it (rollout/sampling.hpp); GPU builds only.
void sample_plain_cuda(void* stream, const bf16* logits, const std::uint64_t* keys, float temperature,
                       std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch);
void sample_plain_cuda(void* stream, const float* logits, const std::uint64_t* keys, float temperature,
                       std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch);

}  // namespace shardrl::kernels
