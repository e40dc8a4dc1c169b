#include "rollout/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/device_stream.hpp"
#include "core/error.hpp"
#include "core/trace.hpp"
#include "rollout/row_limit.hpp"

namespace shardrl {
namespace {

// Rows per prefill call: those of rollout.prefill_tokens positions (at least one); by default all
// of them, or with expert-parallel decoding 1/ranks of them, so the exchange's buffers (every
// rank's routed rows of one call) hold as many rows as whole-expert decoding's MoE buffers.
int prefill_rows_of(const ModelOptions& o, int rows, int max_len, const EngineOptions& engine) {
  SHARDRL_CHECK(!engine.expert_parallel || (o.expert_exchange != nullptr && o.shape.n_experts > 0),
                "expert-parallel decoding needs an MoE model built with an ExpertExchange");
  if (engine.prefill_tokens > 0)
    return static_cast<int>(std::clamp<std::int64_t>(engine.prefill_tokens / max_len, 1, rows));
  if (!engine.expert_parallel) return rows;
  const int W = o.expert_exchange->ranks();
  return std::max(1, (rows + W - 1) / W);
}

// Buffers for a prefill call of (prefill rows, max_len) tokens; decode steps use one token per
// row. Decoding holds every expert (the materialised weight set), or with expert parallelism the
// rank's own.
ModelOptions generation_options(ModelOptions o, int rows, int max_len, PhaseArena* arena, const EngineOptions& engine) {
  o.max_batch = rows;
  o.max_seq_len = max_len;
  o.max_tokens = std::max<long>(rows, long(prefill_rows_of(o, rows, max_len, engine)) * max_len);
  o.activation_recompute = false;
  o.inference_only = true;
  if (!engine.expert_parallel) o.expert_exchange = nullptr;
  o.arena = ArenaPlacement{arena, Phase::rollout};
  return o;
}

// The paged engine's cache: block 0 is the scratch block (what unused table entries point at,
// written by padding rows, never read), then a pool of kv_cache_tokens positions (default: as
// many as the static engine's rows x max_len). Its sequences: `rows` decode slots, then `rows`
// prefill rows.
KvCache make_cache(const ModelOptions& model, int rows, int max_len, const EngineOptions& engine, PhaseArena* arena) {
  const std::size_t es = model.precision == Precision::bf16 ? sizeof(bf16) : sizeof(float);
  const ArenaPlacement at{arena, Phase::rollout};
  if (engine.engine == RolloutEngine::static_batch) return KvCache(model.shape, rows, max_len, es, at);
  KvCache::Paged p;
  p.blocks = static_cast<int>(paged_pool_blocks(rows, max_len, engine));
  p.block_positions = engine.block_positions;
  p.sequences = 2 * rows;
  return KvCache(model.shape, p, max_len, es, at);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(const ModelOptions& model, int rows, int max_len, const ExecSpace& space, PhaseArena* arena,
                     const EngineOptions& engine)
    : engine_(engine),
      model_(generation_options(model, rows, max_len, arena, engine), space),
      cache_(make_cache(model, rows, max_len, engine, arena)),
      max_rows_(rows), max_len_(max_len), prefill_rows_(prefill_rows_of(model, rows, max_len, engine)), keys_(MemoryCategory::workspace, "draw_keys", rows),
      draws_(MemoryCategory::workspace, "draws", 3 * std::size_t(rows)),
      draw_scratch_(MemoryCategory::workspace, "draw_scratch", sample_scratch_floats(rows, model.shape.vocab_size)),
      keys_h_(rows), draws_h_(3 * std::size_t(rows)), drawn_h_(rows), logp_h_(rows), entropy_h_(rows) {
  SHARDRL_CHECK(max_len <= model.shape.max_seq_len, "generation length beyond the model's max_seq_len");
  // The draw counts each row's chunks done in its scratch from zero (rollout/sampling.hpp). A
  // fresh buffer is zero; zeroed here too, so that the draw does not depend on where it lies.
  Kokkos::deep_copy(model_.space(), draw_scratch_.view(), 0.0f);
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

bool Generator::lockstep() const { return model_.options().expert_exchange != nullptr; }

void Generator::agree(std::int32_t* values, int n) {
  if (lockstep()) model_.options().expert_exchange->agree_max(values, n);
}

bool Generator::take_step(bool has_rows) {
  std::int32_t values[2] = {has_rows ? 1 : 0, abandon_ && abandon_() ? 1 : 0};
  agree(values, 2);
  if (values[1] != 0) stats_.abandoned = true;
  return values[0] != 0 && values[1] == 0;
}

void Generator::prefill(const std::vector<const void*>& weights, const std::vector<std::vector<std::int32_t>>& texts,
                        const std::vector<const std::vector<int>*>* blocks, int spare) {
  const int n = static_cast<int>(texts.size()), c = prefill_rows_;
  std::int32_t calls = (n + c - 1) / c;
  agree(&calls);
  const int head = model_.head_unit();
  for (int k = 0; k < calls; ++k) {
    const int first = k * c, rows = std::clamp(n - first, 0, c);
    std::vector<std::int32_t> tokens{0}, sequence{spare};
    int S = 1;
    if (rows > 0) {
      for (int b = first; b < first + rows; ++b) S = std::max(S, static_cast<int>(texts[b].size()));
      tokens.assign(std::size_t(rows) * S, 0);
      sequence.resize(rows);
      for (int b = 0; b < rows; ++b) {
        std::copy(texts[first + b].begin(), texts[first + b].end(), tokens.begin() + std::size_t(b) * S);
        // Static: text b is row b's, in its slot; paged: through prefill sequence max_rows_ + b.
        sequence[b] = blocks ? max_rows_ + b : first + b;
        if (blocks) set_table(max_rows_ + b, *(*blocks)[first + b]);
      }
    }
    const std::vector<std::int32_t> targets(tokens.size(), 0);
    const TraceSpan span("prefill");
    const auto t0 = std::chrono::steady_clock::now();
    if (blocks) cache_.upload_table(model_.space());
    model_.set_batch(tokens.data(), targets.data(), std::max(rows, 1), S);
    model_.set_prefill_sequences(sequence.data());
    for (int u = 0; u < head; ++u) model_.prefill_unit(u, weights[u], cache_);
    model_.space().fence();
    stats_.prefill_s += seconds_since(t0);
    if (blocks)
      for (int b = 0; b < rows; ++b) set_table(max_rows_ + b, {});
  }
}

void Generator::set_table(int sequence, const std::vector<int>& blocks) {
  std::int32_t* t = cache_.table(sequence);
  for (int b = 0; b < cache_.blocks_per_sequence(); ++b)
    t[b] = b < static_cast<int>(blocks.size()) ? blocks[b] : kScratchBlock;
}

void Generator::decode_step(const std::vector<const void*>& weights, const SamplingOptions& sampling, int rows) {
  const int head = model_.head_unit();
  const void* tied = model_.options().shape.tie_embeddings ? weights[0] : nullptr;
  for (int u = 0; u < model_.unit_count(); ++u) model_.decode_unit(u, weights[u], cache_, u == head ? tied : nullptr);
  const int V = model_.options().shape.vocab_size;
  if (model_.options().precision == Precision::bf16)
    sample_tokens(model_.space(), static_cast<const bf16*>(model_.logits()), keys_.data(), sampling, drawn(),
                  drawn_logp(), drawn_entropy(), rows, V, draw_scratch_.data());
  else
    sample_tokens(model_.space(), static_cast<const float*>(model_.logits()), keys_.data(), sampling, drawn(),
                  drawn_logp(), drawn_entropy(), rows, V, draw_scratch_.data());
}

namespace {
template <class T>
using HostUnmanaged = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

void Generator::decode(const std::vector<const void*>& weights, const SamplingOptions& sampling,
                       const std::vector<std::int32_t>& input, const std::vector<std::int32_t>& position,
                       const std::vector<std::int32_t>& slot, const std::vector<std::uint64_t>& key) {
  const int n = static_cast<int>(input.size());
  const TraceSpan span("decode step");
  const auto t0 = std::chrono::steady_clock::now();
  // With graphs the step runs for a bucket of rows; rows past n are padding. A rank decoding in
  // lockstep with nothing left runs one padding row.
  int rows_in_step = std::max(n, 1);
  if (graphs_on_) {
    rows_in_step = 1;
    while (rows_in_step < n) rows_in_step *= 2;
    rows_in_step = std::min(rows_in_step, max_rows_);
  }
  std::vector<std::int32_t> step_input(input), step_position(position), step_slot(slot);
  step_input.resize(rows_in_step, 0);
  step_position.resize(rows_in_step, 0);
  step_slot.resize(rows_in_step, 0);
  std::fill(keys_h_.begin(), keys_h_.end(), 0);
  std::copy(key.begin(), key.end(), keys_h_.begin());
  // Padding rows write position 0 of sequences no active row reads again (there are enough:
  // the bucket is at most the generator's rows).
  std::vector<char> slot_used(std::size_t(cache_.rows()), 0);
  for (int i = 0; i < n; ++i) slot_used[std::size_t(slot[i])] = 1;
  for (int i = n, free_slot = 0; i < rows_in_step; ++i) {
    while (slot_used[std::size_t(free_slot)]) ++free_slot;
    step_slot[i] = free_slot++;
  }
  model_.set_decode_step(step_input.data(), step_position.data(), rows_in_step, step_slot.data());
  // On the model's stream, the step's rows only: no device-wide fence before the step.
  const auto step_rows = std::make_pair(std::size_t(0), std::size_t(rows_in_step));
  Kokkos::deep_copy(model_.space(), Kokkos::subview(keys_.view(), step_rows),
                    HostUnmanaged<std::uint64_t>(keys_h_.data(), std::size_t(rows_in_step)));
  if (graphs_on_) {
    GraphKey graph_key{rows_in_step, sampling.temperature, sampling.top_p, sampling.top_k, weights};
    replay_weights_ = &weights;
    replay_sampling_ = sampling;
    replay_rows_ = rows_in_step;
    const StreamHandle stream = stream_handle(model_.space());
    auto found = graphs_.find(graph_key);
    if (found == graphs_.end()) {
      // A new bucket's first step runs eagerly: first launches do things once (loading
      // kernels, Kokkos' lock arrays, scratch) that capture must not see.
      decode_step(weights, sampling, rows_in_step);
      graphs_.emplace(std::move(graph_key), std::make_unique<CapturedGraph>());
    } else {
      CapturedGraph& g = *found->second;
      if (!g.captured()) g.capture(stream, [this] { decode_step(*replay_weights_, replay_sampling_, replay_rows_); });
      g.replay(stream);
    }
  } else {
    decode_step(weights, sampling, rows_in_step);
  }
  // One copy back of the three draws (each of three blocking copies waited a round trip: 27-60 us
  // a step of 0.9-1.8 ms on an H200, measured in session 35).
  Kokkos::deep_copy(model_.space(), HostUnmanaged<std::uint32_t>(draws_h_.data(), draws_h_.size()), draws_.view());
  model_.space().fence();
  const std::size_t row_bytes = std::size_t(rows_in_step) * sizeof(std::uint32_t);
  std::memcpy(drawn_h_.data(), draws_h_.data(), row_bytes);
  std::memcpy(logp_h_.data(), draws_h_.data() + max_rows_, row_bytes);
  std::memcpy(entropy_h_.data(), draws_h_.data() + 2 * std::size_t(max_rows_), row_bytes);
  stats_.decode_s += seconds_since(t0);
  ++stats_.decode_steps;
  stats_.decode_row_steps += n;
  if (2 * n < max_rows_) ++stats_.sparse_steps;
}

std::vector<Completion> Generator::generate(const std::vector<const void*>& weights,
                                            const std::vector<GenerationRow>& rows, const SamplingOptions& sampling,
                                            int max_new_tokens, std::uint64_t seed, std::int64_t iteration,
                                            const StopIds& stop) {
  std::size_t longest = 0;
  for (const auto& r : rows) {
    SHARDRL_CHECK(!r.prompt.empty(), "an empty prompt");
    longest = std::max(longest, r.prompt.size());
  }
  SHARDRL_CHECK(static_cast<int>(longest) + max_new_tokens <= max_len_,
                fmt::format("prompt of {} tokens + {} new tokens exceed the generator's {} positions", longest,
                            max_new_tokens, max_len_));
  stats_ = GenerationStats{};
  stats_.kv_bytes = cache_.bytes();
  if (engine_.engine == RolloutEngine::paged)
    return generate_paged(weights, rows, sampling, max_new_tokens, seed, iteration, stop);
  return generate_static(weights, rows, sampling, max_new_tokens, seed, iteration, stop);
}

std::vector<Completion> Generator::generate_static(const std::vector<const void*>& weights,
                                                   const std::vector<GenerationRow>& rows,
                                                   const SamplingOptions& sampling, int max_new_tokens,
                                                   std::uint64_t seed, std::int64_t iteration, const StopIds& stop) {
  const int R = static_cast<int>(rows.size());
  SHARDRL_CHECK((R >= 1 || lockstep()) && R <= max_rows_, fmt::format("{} rows for a generator of {}", R, max_rows_));
  stats_.kv_peak_bytes = stats_.kv_bytes;

  std::vector<Completion> out(R);
  if (max_new_tokens == 0) return out;

  // Prefill: every row's prompt but its last token into the cache (row r is slot r), the rows of
  // a call padded to its longest; padding positions are overwritten by the row's own decode steps
  // before anything attends to them. A rank in lockstep with fewer calls than another pads with
  // forwards into slot R, unused (a rank with every slot used has the most calls), or when it has
  // nothing to prefill into position 0 of slot 0, which its first decode step writes.
  int prefix = 0;
  for (const auto& r : rows) prefix = std::max(prefix, static_cast<int>(r.prompt.size()) - 1);
  std::vector<std::vector<std::int32_t>> texts;
  if (prefix > 0)
    for (const auto& r : rows) {
      texts.emplace_back(r.prompt.begin(), r.prompt.end() - 1);
      stats_.prefill_tokens += static_cast<std::int64_t>(r.prompt.size()) - 1;
    }
  if (prefix > 0 || lockstep()) prefill(weights, texts, nullptr, R < max_rows_ && prefix > 0 ? R : 0);

  // Decode: each step feeds every active row one token at its own position (the last prompt
  // token first) and draws the next. A finished row leaves the step (its cache slot stays; the
  // others do not move), so finished sequences stop costing work. In lockstep the steps go on
  // while any rank has a row.
  std::vector<int> active(R);
  for (int r = 0; r < R; ++r) active[r] = r;
  std::vector<std::int32_t> next(R);
  for (int r = 0; r < R; ++r) next[r] = rows[r].prompt.back();
  while (take_step(!active.empty())) {
    std::vector<std::int32_t> input, position, slot;
    std::vector<std::uint64_t> key;
    for (int r : active) {
      input.push_back(next[r]);
      position.push_back(static_cast<std::int32_t>(rows[r].prompt.size() - 1 + out[r].tokens.size()));
      slot.push_back(r);
      key.push_back(draw_key(seed, iteration, rows[r].prompt_index, rows[r].sample_index,
                             static_cast<std::int64_t>(out[r].tokens.size())));
    }
    decode(weights, sampling, input, position, slot, key);
    std::vector<int> still;
    for (std::size_t i = 0; i < active.size(); ++i) {
      const int r = active[i];
      Completion& c = out[r];
      SHARDRL_CHECK(drawn_h_[i] >= 0, "the model's logits were all NaN (it diverged): the sampler drew no token");
      c.tokens.push_back(drawn_h_[i]);
      c.logp.push_back(logp_h_[i]);
      c.entropy.push_back(entropy_h_[i]);
      c.finished = stop.contains(drawn_h_[i]);
      next[r] = drawn_h_[i];
      if (!c.finished && static_cast<int>(c.tokens.size()) < row_token_limit(rows[r], max_new_tokens)) still.push_back(r);
    }
    active.swap(still);
  }
  return out;
}

}  // namespace shardrl
