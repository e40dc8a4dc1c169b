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
#include "kernels/sample_plain.hpp"

namespace shardrl {

struct SamplingOptions {
  float temperature = 1.0f;   // 0: greedy
  int top_k = 0;              // 0: off; else keep tokens whose logit is >= the k-th largest
  float top_p = 1.0f;         // 1: off; else keep the most likely tokens whose mass reaches top_p
};

// The temperature of the distribution a draw's log-probability is recorded under (and the train
// phase scores the same tokens under): greedy draws record the model's own, temperature 1.
inline float sampling_temperature(const SamplingOptions& opt) { return opt.temperature > 0.0f ? opt.temperature : 1.0f; }

// The chunks, the scratch's size, a key's uniform number: kernels/sample_plain.hpp.
using kernels::kSampleChunkTokens;
using kernels::mix64;
using kernels::sample_scratch_floats;
using kernels::uniform01;

// The key of one draw.
KOKKOS_INLINE_FUNCTION std::uint64_t draw_key(std::uint64_t seed, std::int64_t iteration, std::int64_t prompt,
                                              std::int64_t sample, std::int64_t position) {
  std::uint64_t k = mix64(seed);
  k = mix64(k ^ static_cast<std::uint64_t>(iteration));
  k = mix64(k ^ static_cast<std::uint64_t>(prompt));
  k = mix64(k ^ static_cast<std::uint64_t>(sample));
  return mix64(k ^ static_cast<std::uint64_t>(position));
}

// For each row r < R: token[r] drawn from logits(r, :) (V entries, T = float or bf16) with the
// uniform number of keys[r]; with t = the temperature (1 when greedy) and p = softmax(logits(r, :) / t):
// logp[r] = log p[token[r]] and entropy[r] = -sum_v p_v log p_v. `scratch` holds
// sample_scratch_floats(R, V) floats on the device, zero before the first draw (nothing is
// allocated here, so a decode step can be captured as a CUDA graph).
template <class T>
void sample_tokens(const ExecSpace& space, const T* logits, const std::uint64_t* keys, const SamplingOptions& opt,
                   std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch);

}  // namespace shardrl

#include "rollout/sampling_impl.hpp"
