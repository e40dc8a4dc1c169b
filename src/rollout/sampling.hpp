// Drawing the next token of each row from its logits, on the device: greedy, temperature,
// top-k and top-p (nucleus), applied in that order as in Hugging Face's generate. The random
// number of a draw is a function of its key alone (seed, iteration, global prompt index, sample
// index, position): never of the rank, so any world size and a resumed run draw the same tokens.
// The log-probability recorded for the drawn token is under the tempered distribution
// softmax(logits / T) with nothing excluded (top-k and top-p truncation ignored, as verl and TRL
// do): what the train phase computes for the same token at the same temperature
// (kernels/cross_entropy.hpp), so the importance ratio compares the policy that sampled. Greedy
// draws record the distribution at temperature 1.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl {

struct SamplingOptions {
  float temperature = 1.0f;   // 0: greedy
  int top_k = 0;              // 0: off; else keep tokens whose logit is >= the k-th largest
  float top_p = 1.0f;         // 1: off; else keep the most likely tokens whose mass reaches top_p
};

// The temperature of the distribution a draw's log-probability is recorded under (and the train
// phase scores the same tokens under): greedy draws record the model's own, temperature 1.
inline float sampling_temperature(const SamplingOptions& opt) { return opt.temperature > 0.0f ? opt.temperature : 1.0f; }

KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The key of one draw.
KOKKOS_INLINE_FUNCTION std::uint64_t draw_key(std::uint64_t seed, std::int64_t iteration, std::int64_t prompt,
                                              std::int64_t sample, std::int64_t position) {
  std::uint64_t k = mix64(seed);
  k = mix64(k ^ static_cast<std::uint64_t>(iteration));
  k = mix64(k ^ static_cast<std::uint64_t>(prompt));
  k = mix64(k ^ static_cast<std::uint64_t>(sample));
  return mix64(k ^ static_cast<std::uint64_t>(position));
}

// A uniform number in [0, 1) from a key (24 random bits: exact in fp32).
KOKKOS_INLINE_FUNCTION float uniform01(std::uint64_t key) {
  return static_cast<float>(mix64(key) >> 40) * (1.0f / 16777216.0f);
}

// Plain sampling (a temperature, no top-k or top-p: what RL rollouts draw with) splits each row's
// vocabulary into chunks of this many tokens, each reduced by its own team, so that a draw from a
// 152K vocabulary is not one team's three passes over it (a latency-bound 0.23 ms at any batch
// up to the GPU's SM count, 1 ms at 512 rows). The chunks depend on V only: a row's draw is the
// same whatever the batch.
constexpr int kSampleChunkTokens = 2048;

// Device floats sample_tokens needs as scratch for R rows of V logits: each chunk's maximum,
// mass and first moment.
inline std::size_t sample_scratch_floats(int R, int V) {
  const std::size_t chunks = (static_cast<std::size_t>(V) + kSampleChunkTokens - 1) / kSampleChunkTokens;
  return 3 * static_cast<std::size_t>(R) * chunks;
}

// For each row r < R: token[r] drawn from logits(r, :) (V entries, T = float or bf16) with the
// uniform number of keys[r]; with t = the temperature (1 when greedy) and p = softmax(logits(r, :) / t):
// logp[r] = log p[token[r]] and entropy[r] = -sum_v p_v log p_v. `scratch` holds
// sample_scratch_floats(R, V) floats on the device (nothing is allocated here, so a decode step
// can be captured as a CUDA graph).
template <class T>
void sample_tokens(const ExecSpace& space, const T* logits, const std::uint64_t* keys, const SamplingOptions& opt,
                   std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch);

}  // namespace shardrl

#include "rollout/sampling_impl.hpp"
