#include "rollout/generator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/device_stream.hpp"
#include "core/error.hpp"

namespace shardrl {
namespace {

// Buffers for a prefill of (rows, max_len) tokens; decode steps use one token per row.
ModelOptions generation_options(ModelOptions o, int rows, int max_len, PhaseArena* arena) {
  o.max_batch = rows;
  o.max_seq_len = max_len;
  o.activation_recompute = false;
  o.inference_only = true;
  o.expert_exchange = nullptr;   // decoding holds every expert (the materialised weight set)
  o.arena = ArenaPlacement{arena, Phase::rollout};
  return o;
}

}  // namespace

Generator::Generator(const ModelOptions& model, int rows, int max_len, const ExecSpace& space, PhaseArena* arena)
    : model_(generation_options(model, rows, max_len, arena), space),
      cache_(model.shape, rows, max_len, model.precision == Precision::bf16 ? sizeof(bf16) : sizeof(float),
             ArenaPlacement{arena, Phase::rollout}),
      max_rows_(rows), max_len_(max_len), keys_(MemoryCategory::workspace, "draw_keys", rows),
      drawn_(MemoryCategory::workspace, "drawn", rows), drawn_logp_(MemoryCategory::workspace, "drawn_logp", rows),
      drawn_entropy_(MemoryCategory::workspace, "drawn_entropy", rows) {
  SHARDRL_CHECK(max_len <= model.shape.max_seq_len, "generation length beyond the model's max_seq_len");
}

void Generator::use_decode_graphs(bool host_replay_for_tests) {
  SHARDRL_CHECK(CapturedGraph::native() || host_replay_for_tests,
                "rollout.cuda_graph = \"decode\" needs a CUDA build (the config check should have said so)");
  graphs_on_ = true;
}

int Generator::decode_graph_captures() const {
  int n = 0;
  for (const auto& [key, graph] : graphs_) n += graph->captured() ? 1 : 0;
  return n;
}

void Generator::decode_step(const std::vector<const void*>& weights, const SamplingOptions& sampling, int rows) {
  const int head = model_.head_unit();
  const void* tied = model_.options().shape.tie_embeddings ? weights[0] : nullptr;
  for (int u = 0; u < model_.unit_count(); ++u) model_.decode_unit(u, weights[u], cache_, u == head ? tied : nullptr);
  const int V = model_.options().shape.vocab_size;
  if (model_.options().precision == Precision::bf16)
    sample_tokens(model_.space(), static_cast<const bf16*>(model_.logits()), keys_.data(), sampling, drawn_.data(),
                  drawn_logp_.data(), drawn_entropy_.data(), rows, V);
  else
    sample_tokens(model_.space(), static_cast<const float*>(model_.logits()), keys_.data(), sampling, drawn_.data(),
                  drawn_logp_.data(), drawn_entropy_.data(), rows, V);
}

std::vector<Completion> Generator::generate(const std::vector<const void*>& weights,
                                            const std::vector<GenerationRow>& rows, const SamplingOptions& sampling,
                                            int max_new_tokens, std::uint64_t seed, std::int64_t iteration,
                                            std::int32_t eos) {
  const int R = static_cast<int>(rows.size());
  SHARDRL_CHECK(R >= 1 && R <= max_rows_, fmt::format("{} rows for a generator of {}", R, max_rows_));
  std::size_t longest = 0;
  for (const auto& r : rows) {
    SHARDRL_CHECK(!r.prompt.empty(), "an empty prompt");
    longest = std::max(longest, r.prompt.size());
  }
  SHARDRL_CHECK(static_cast<int>(longest) + max_new_tokens <= max_len_,
                fmt::format("prompt of {} tokens + {} new tokens exceed the generator's {} positions", longest,
                            max_new_tokens, max_len_));
  const int head = model_.head_unit();

  std::vector<Completion> out(R);
  if (max_new_tokens == 0) return out;

  // Prefill: every row's prompt but its last token, all positions at once, into the cache
  // (row r is slot r). Shorter prompts are padded; their padding positions are overwritten by
  // the row's own decode steps before anything attends to them.
  int prefix = 0;
  for (const auto& r : rows) prefix = std::max(prefix, static_cast<int>(r.prompt.size()) - 1);
  if (prefix > 0) {
    std::vector<std::int32_t> tokens(std::size_t(R) * prefix, 0), targets(tokens.size(), 0);
    for (int r = 0; r < R; ++r)
      for (std::size_t t = 0; t + 1 < rows[r].prompt.size(); ++t) tokens[std::size_t(r) * prefix + t] = rows[r].prompt[t];
    model_.set_batch(tokens.data(), targets.data(), R, prefix);
    for (int u = 0; u < head; ++u) model_.prefill_unit(u, weights[u], cache_);
  }

  // Decode: each step feeds every active row one token at its own position (the last prompt
  // token first) and draws the next. A finished row leaves the step (its cache slot stays; the
  // others do not move), so finished sequences stop costing work.
  std::vector<int> active(R);
  for (int r = 0; r < R; ++r) active[r] = r;
  std::vector<std::int32_t> input(R);
  for (int r = 0; r < R; ++r) input[r] = rows[r].prompt.back();
  auto keys_h = Kokkos::create_mirror_view(keys_.view());
  auto drawn_h = Kokkos::create_mirror_view(drawn_.view());
  auto logp_h = Kokkos::create_mirror_view(drawn_logp_.view());
  auto entropy_h = Kokkos::create_mirror_view(drawn_entropy_.view());
  while (!active.empty()) {
    const int n = static_cast<int>(active.size());
    // With graphs the step runs for a bucket of rows; rows past n are padding.
    int rows_in_step = n;
    if (graphs_on_) {
      rows_in_step = 1;
      while (rows_in_step < n) rows_in_step *= 2;
      rows_in_step = std::min(rows_in_step, max_rows_);
    }
    std::vector<std::int32_t> step_input(rows_in_step, 0), step_position(rows_in_step, 0), step_slot(rows_in_step);
    std::vector<char> slot_used(max_rows_, 0);
    for (int i = 0; i < n; ++i) {
      const int r = active[i];
      step_input[i] = input[r];
      step_position[i] = static_cast<std::int32_t>(rows[r].prompt.size() - 1 + out[r].tokens.size());
      step_slot[i] = r;
      slot_used[r] = 1;
      keys_h(i) = draw_key(seed, iteration, rows[r].prompt_index, rows[r].sample_index,
                           static_cast<std::int64_t>(out[r].tokens.size()));
    }
    // Padding rows write position 0 of slots no active row reads again (there are enough:
    // the bucket is at most the generator's rows).
    for (int i = n, free_slot = 0; i < rows_in_step; ++i) {
      while (slot_used[free_slot]) ++free_slot;
      step_slot[i] = free_slot++;
      keys_h(i) = 0;
    }
    model_.set_decode_step(step_input.data(), step_position.data(), rows_in_step, step_slot.data());
    Kokkos::deep_copy(keys_.view(), keys_h);
    if (graphs_on_) {
      std::string key = fmt::format("{} rows | sampling {} {} {}", rows_in_step, sampling.temperature, sampling.top_k,
                                    sampling.top_p);
      for (const void* w : weights) key += fmt::format(" {}", w);
      replay_weights_ = &weights;
      replay_sampling_ = sampling;
      replay_rows_ = rows_in_step;
      const StreamHandle stream = stream_handle(model_.space());
      auto found = graphs_.find(key);
      if (found == graphs_.end()) {
        // A new bucket's first step runs eagerly: first launches do things once (loading
        // kernels, Kokkos' lock arrays, scratch) that capture must not see.
        decode_step(weights, sampling, rows_in_step);
        graphs_[key] = std::make_unique<CapturedGraph>();
      } else {
        CapturedGraph& g = *found->second;
        if (!g.captured()) g.capture(stream, [this] { decode_step(*replay_weights_, replay_sampling_, replay_rows_); });
        g.replay(stream);
      }
    } else {
      decode_step(weights, sampling, n);
    }
    Kokkos::deep_copy(drawn_h, drawn_.view());
    Kokkos::deep_copy(logp_h, drawn_logp_.view());
    Kokkos::deep_copy(entropy_h, drawn_entropy_.view());
    std::vector<int> still;
    for (int i = 0; i < n; ++i) {
      const int r = active[i];
      Completion& c = out[r];
      c.tokens.push_back(drawn_h(i));
      c.logp.push_back(logp_h(i));
      c.entropy.push_back(entropy_h(i));
      c.finished = drawn_h(i) == eos;
      input[r] = drawn_h(i);
      if (!c.finished && static_cast<int>(c.tokens.size()) < max_new_tokens) still.push_back(r);
    }
    active.swap(still);
  }
  return out;
}

}  // namespace shardrl
