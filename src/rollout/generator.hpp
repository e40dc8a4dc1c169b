// Generation for a batch of rows (a prompt's group of samples is several rows): one prefill of
// all prompts writes the KV cache, then each row draws its next token per step until EOS or
// max_new_tokens, at its own position (prompts of different lengths need no alignment); a
// finished row leaves the step. A draw's key is (seed, iteration, prompt index, sample index, token index), never the
// row or the rank: the same request draws the same completions in any batch and at any world
// size (up to GEMM rounding that differs between batch shapes).
#pragma once

#include <cstdint>
#include <vector>

#include "model/kv_cache.hpp"
#include "model/transformer.hpp"
#include "rollout/sampling.hpp"

namespace shardrl {

struct GenerationRow {
  std::vector<std::int32_t> prompt;   // at least one token
  std::int64_t prompt_index = 0;      // global index of the prompt in the iteration's batch
  std::int64_t sample_index = 0;      // which of the prompt's samples
};

struct Completion {
  std::vector<std::int32_t> tokens;   // generated tokens, EOS included when drawn
  std::vector<float> logp;            // log-probability of each under the model
  bool finished = false;              // ended with EOS (else: max_new_tokens reached)
};

class Generator {
 public:
  // Buffers for up to `rows` rows of up to `max_len` positions (prompt and completion); with an
  // arena, the KV cache and activations live in its rollout region (ignoring model.arena).
  Generator(const ModelOptions& model, int rows, int max_len, const ExecSpace& space, PhaseArena* arena = nullptr);

  // `weights[u]`: every unit's full weights in the compute type (the rollout's materialised
  // set); `tied_embedding` is weights[0] when the LM head is tied.
  std::vector<Completion> generate(const std::vector<const void*>& weights, const std::vector<GenerationRow>& rows,
                                   const SamplingOptions& sampling, int max_new_tokens, std::uint64_t seed,
                                   std::int64_t iteration, std::int32_t eos);

  Transformer& model() { return model_; }

 private:
  Transformer model_;
  KvCache cache_;
  int max_rows_, max_len_;
  Kokkos::View<std::uint64_t*, MemSpace> keys_;
  Kokkos::View<std::int32_t*, MemSpace> drawn_;
  DeviceView<float> drawn_logp_;
};

}  // namespace shardrl
