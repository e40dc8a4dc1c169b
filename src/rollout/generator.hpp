// Generation for a batch of rows (a prompt's group of samples is several rows), by one of two
// engines (rollout/engine_choice.hpp). Static: a prefill of all rows' prompts writes the KV
// cache, then each row draws its next token per step until EOS or max_new_tokens, at its own
// position (prompts of different lengths need no alignment); a finished row leaves the step.
// Paged: rows wait in order for one of the generator's decode slots; a prompt is prefilled once
// when its first sample is admitted and its samples share its cache blocks; a finished row's slot
// goes to the next waiting row at the next step. Either prefills in calls of at most
// EngineOptions::prefill_tokens positions, for which the activations are sized. A draw's key is
// (seed, iteration, prompt index, sample index, token index), never the row or the rank: the same
// request draws the same completions in any batch and at any world size (up to GEMM rounding that
// differs between batch shapes).
// With expert parallelism (EngineOptions::expert_parallel) each rank decodes its own rows with its
// own experts, every MoE layer exchanging routed rows with the other ranks: the ranks run the
// same forwards in lockstep (as many prefill calls as the rank with the most; decode steps while
// any rank has a row), a rank short of work running padding ones.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/captured_graph.hpp"
#include "model/kv_cache.hpp"
#include "model/transformer.hpp"
#include "rollout/engine_choice.hpp"
#include "rollout/sampling.hpp"
#include "rollout/stop_ids.hpp"

namespace shardrl {

struct GenerationRow {
  std::vector<std::int32_t> prompt;   // at least one token
  std::int64_t prompt_index = 0;      // global index of the prompt in the iteration's batch
  std::int64_t sample_index = 0;      // which of the prompt's samples
  int max_new_tokens = 0;             // this row's own limit, at most the call's (0: the call's)
};

struct Completion {
  std::vector<std::int32_t> tokens;   // generated tokens, EOS included when drawn
  std::vector<float> logp;            // log-probability of each under the model at the sampling temperature
  std::vector<float> entropy;         // entropy of the distribution each was drawn from (same temperature)
  bool finished = false;              // ended with one of its stop ids (else: max_new_tokens reached)
};

// What the last generate() did: the counts the tests and bench_rollout read.
struct GenerationStats {
  std::int64_t prefill_tokens = 0;     // prompt (and recomputed) tokens run through prefill, no padding
  std::int64_t decode_steps = 0;
  std::int64_t decode_row_steps = 0;   // rows summed over steps: the tokens drawn
  std::int64_t sparse_steps = 0;       // steps with fewer than half of the generator's rows
  std::int64_t preemptions = 0;        // paged: sequences evicted for blocks, recomputed later
  std::size_t kv_bytes = 0;            // the KV cache allocated (keys and values, every layer)
  std::size_t kv_peak_bytes = 0;       // of it, the most in use at once (static: all of it)
  double prefill_s = 0, decode_s = 0;  // wall time in prefill (fenced) and in the decode steps
  bool abandoned = false;              // cut short by the abandon check: its completions are partial
};

class Generator {
 public:
  // Buffers for up to `rows` rows decoding at once, of up to `max_len` positions (prompt and
  // completion); with an arena, the KV cache and activations live in its rollout region
  // (ignoring model.arena).
  Generator(const ModelOptions& model, int rows, int max_len, const ExecSpace& space, PhaseArena* arena = nullptr,
            const EngineOptions& engine = {});

  // `weights[u]`: every unit's full weights in the compute type (the rollout's materialised
  // set); `tied_embedding` is weights[0] when the LM head is tied.
  std::vector<Completion> generate(const std::vector<const void*>& weights, const std::vector<GenerationRow>& rows,
                                   const SamplingOptions& sampling, int max_new_tokens, std::uint64_t seed,
                                   std::int64_t iteration, const StopIds& stop);

  Transformer& model() { return model_; }
  int max_rows() const { return max_rows_; }
  const EngineOptions& engine() const { return engine_; }
  const GenerationStats& last_stats() const { return stats_; }

  // rollout.cuda_graph = "decode": each decode step runs as a CUDA graph per batch bucket (the
  // active rows rounded up to a power of two, at most the generator's rows; the extra rows
  // write position 0 of cache slots no active row uses, and their draws are dropped). A
  // bucket's first step runs eagerly, its second is captured, later ones replay. On CPU builds
  // only with host_replay_for_tests (see core/captured_graph.hpp).
  void use_decode_graphs(bool host_replay_for_tests = false);
  // A check, asked before every decode step, that cuts a generate() short when it says so (a
  // stop that leaves no time to finish the rollout): the call returns its rows' partial
  // completions with last_stats().abandoned set, for the caller to drop. In lockstep the ranks
  // agree on it with their other step values; a generator whose peers run its steps otherwise
  // (tensor-parallel rollout) must be given a check they agree on (GrpoLoop wraps it in the
  // group's all-reduce). Empty: never.
  void abandon_when(std::function<bool()> check) { abandon_ = std::move(check); }
  int decode_graph_captures() const;
  bool decode_graphs() const { return graphs_on_; }

 private:
  std::vector<Completion> generate_static(const std::vector<const void*>& weights,
                                         const std::vector<GenerationRow>& rows, const SamplingOptions& sampling,
                                         int max_new_tokens, std::uint64_t seed, std::int64_t iteration,
                                         const StopIds& stop);
  std::vector<Completion> generate_paged(const std::vector<const void*>& weights,
                                        const std::vector<GenerationRow>& rows, const SamplingOptions& sampling,
                                        int max_new_tokens, std::uint64_t seed, std::int64_t iteration,
                                        const StopIds& stop);
  // One decode step of rows i < input.size(): token input[i] at position[i] of cache sequence
  // slot[i], drawn with key[i]; the draws land in drawn_h_, logp_h_, entropy_h_ (row i at i).
  // With graphs the step runs for a bucket of rows, the extra ones on sequences no row uses.
  void decode(const std::vector<const void*>& weights, const SamplingOptions& sampling,
              const std::vector<std::int32_t>& input, const std::vector<std::int32_t>& position,
              const std::vector<std::int32_t>& slot, const std::vector<std::uint64_t>& key);
  // The decode step's work on the device: every unit and the draw for `rows` rows.
  void decode_step(const std::vector<const void*>& weights, const SamplingOptions& sampling, int rows);
  // texts[b] (a sequence's tokens but its last) into the cache, in calls of at most prefill_rows_
  // rows: static (blocks null), text b into row b's slot; paged, through prefill sequence
  // max_rows_ + j and the blocks (*blocks)[b]. In lockstep as many calls as the rank with the
  // most; a padding call is one token into position 0 of cache sequence `spare`.
  void prefill(const std::vector<const void*>& weights, const std::vector<std::vector<std::int32_t>>& texts,
               const std::vector<const std::vector<int>*>* blocks, int spare);
  // Paged: cache sequence `sequence`'s block-table row: `blocks`, then the scratch block.
  void set_table(int sequence, const std::vector<int>& blocks);
  // Expert-parallel decoding: each MoE layer's forward exchanges tokens with the other ranks, so
  // every rank runs the same forwards (a rank without rows runs padding ones); `values` become
  // their largest over the ranks, which settles each round's calls. Otherwise a no-op.
  bool lockstep() const;
  void agree(std::int32_t* values, int n = 1);
  // Before a decode step: whether to take it, given whether this rank has rows to step. False
  // when no rank has (lockstep) or the abandon check cuts the call short (stats_.abandoned).
  bool take_step(bool has_rows);

  static constexpr int kScratchBlock = 0;   // paged: what unused table entries point at

  EngineOptions engine_;
  Transformer model_;
  KvCache cache_;
  int max_rows_, max_len_;
  int prefill_rows_;   // rows per prefill call (EngineOptions::prefill_tokens)
  GenerationStats stats_;
  std::function<bool()> abandon_;
  LedgerView<std::uint64_t> keys_;   // (rows): each row's draw key of the step
  // (3 rows) words: each row's draw (the token drawn, its log-probability, the entropy of the
  // distribution it was drawn from; rows of each at drawn(), drawn_logp(), drawn_entropy()), in
  // one buffer so that a step reads them back in one copy.
  LedgerView<std::uint32_t> draws_;
  LedgerView<float> draw_scratch_;   // sample_scratch_floats(rows, vocab): the draw's chunk sums and counts
  // Host copies of keys_ and draws_ (plain vectors: nothing that Kokkos allocates outside the
  // ledger); the draws unpacked into drawn_h_, logp_h_, entropy_h_.
  std::vector<std::uint64_t> keys_h_;
  std::vector<std::uint32_t> draws_h_;
  std::vector<std::int32_t> drawn_h_;
  std::vector<float> logp_h_, entropy_h_;
  std::int32_t* drawn() const { return reinterpret_cast<std::int32_t*>(draws_.data()); }
  float* drawn_logp() const { return reinterpret_cast<float*>(draws_.data() + max_rows_); }
  float* drawn_entropy() const { return reinterpret_cast<float*>(draws_.data() + 2 * std::size_t(max_rows_)); }
  bool graphs_on_ = false;
  // What a decode graph was captured for: its bucket of rows, the sampling it draws with and the
  // weights it reads (their addresses are in the graph). Compared, not formatted, each step.
  struct GraphKey {
    int rows = 0;
    float temperature = 0.0f, top_p = 0.0f;
    int top_k = 0;
    std::vector<const void*> weights;
    bool operator<(const GraphKey& o) const {
      return std::tie(rows, temperature, top_p, top_k, weights) <
             std::tie(o.rows, o.temperature, o.top_p, o.top_k, o.weights);
    }
  };
  std::map<GraphKey, std::unique_ptr<CapturedGraph>> graphs_;
  // What a host replay of a decode graph runs with (the current call's).
  const std::vector<const void*>* replay_weights_ = nullptr;
  SamplingOptions replay_sampling_;
  int replay_rows_ = 0;
};

}  // namespace shardrl
