// A rollout as RL runs it, through both engines on the same workload in the same run: P prompts
// of Lp tokens, G samples each, every row ending at its own length, drawn from a seeded
// log-normal distribution (median --median, capped at --max-new-tokens; no EOS). Prints, per
// engine: generated tokens/s (the whole rollout's time), prefill tokens/s and the prompt tokens
// prefilled, the share of decode steps with fewer than half of the rows, preemptions, and the KV
// cache allocated and at most in use. Both engines run with --slots rows decoding at once
// (default: every row): the static engine takes the rows in consecutive batches of that many,
// each to its end, as a rollout too large for one batch must; the paged one refills its slots
// (--paged-slots, default --slots: a smaller pool than the static cache can keep more rows
// decoding), with a pool of --kv-cache-tokens positions (default: the static engine's size).
//   bench_rollout [--config F] [--set k=v ...] [--prompts P] [--samples G] [--prompt-tokens Lp]
//                 [--median M] [--max-new-tokens N] [--slots S] [--paged-slots S] [--kv-cache-tokens T]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include "bench_config.hpp"
#include "core/kokkos.hpp"
#include "model/dense_parameters.hpp"
#include "rollout/generator.hpp"

using namespace shardrl;

int main(int argc, char** argv) {
  CLI::App app{"shardrl rollout benchmark: the static and the paged engine on an RL-shaped rollout"};
  BenchConfigArgs config_args;
  int prompts = 32, samples = 8, prompt_tokens = 256, median = 256, max_new = 2048, slots = 0, paged_slots = 0;
  std::int64_t kv_cache_tokens = 0;
  config_args.add_to(app);
  app.add_option("--prompts", prompts, "Prompts (P)")->check(CLI::PositiveNumber);
  app.add_option("--samples", samples, "Samples per prompt (G)")->check(CLI::PositiveNumber);
  app.add_option("--prompt-tokens", prompt_tokens, "Prompt length (Lp)")->check(CLI::PositiveNumber);
  app.add_option("--median", median, "Median completion length")->check(CLI::PositiveNumber);
  app.add_option("--max-new-tokens", max_new, "Longest completion (the lengths' cap)")->check(CLI::PositiveNumber);
  app.add_option("--slots", slots, "Rows decoding at once (0: every row); static: batches of this many")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--paged-slots", paged_slots, "Paged engine: rows decoding at once (0: as --slots)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-cache-tokens", kv_cache_tokens, "Paged engine: positions of the block pool (0: as static)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  Config cfg;
  if (!config_args.load("bench_rollout", cfg)) return 2;
  KokkosRuntime kokkos(0);
  const ModelOptions model = model_options(cfg);

  // The workload: row r = prompt r / G, sample r % G; lengths log-normal (sigma 1: a long tail).
  const int R = prompts * samples;
  std::mt19937_64 gen(static_cast<std::uint64_t>(cfg.run.seed));
  std::lognormal_distribution<double> length(std::log(double(median)), 1.0);
  std::uniform_int_distribution<int> token(0, std::min(model.shape.vocab_size, 256) - 1);
  std::vector<GenerationRow> rows;
  std::int64_t want_tokens = 0;
  for (int p = 0; p < prompts; ++p) {
    std::vector<std::int32_t> prompt(prompt_tokens);
    for (auto& t : prompt) t = token(gen);
    for (int g = 0; g < samples; ++g) {
      GenerationRow row{prompt, p, g};
      row.max_new_tokens = std::clamp(static_cast<int>(std::lround(length(gen))), 1, max_new);
      want_tokens += row.max_new_tokens;
      rows.push_back(std::move(row));
    }
  }
  std::cout << fmt::format("{} {} on {}: {} prompts x {} samples, prompts of {} tokens, completions log-normal "
                           "(median {}, cap {}): {} tokens to generate\n",
                           cfg.model.preset, model.precision == Precision::bf16 ? "bf16" : "fp32",
                           execution_space_name(), prompts, samples, prompt_tokens, median, max_new, want_tokens);

  for (const RolloutEngine engine : {RolloutEngine::static_batch, RolloutEngine::paged}) {
    EngineOptions e;
    e.engine = engine;
    e.kv_cache_tokens = kv_cache_tokens;
    e.prefill_tokens = cfg.rollout.prefill_tokens;
    const int engine_slots = engine == RolloutEngine::paged && paged_slots > 0 ? paged_slots : slots;
    const int capacity = engine_slots > 0 ? std::min(engine_slots, R) : R;
    Generator g(model, capacity, prompt_tokens + max_new, ExecSpace(), nullptr, e);
    if (cfg.rollout.cuda_graph == RolloutGraph::decode) g.use_decode_graphs();
    DenseParameters params(g.model(), ExecSpace());
    params.initialize(static_cast<std::uint64_t>(cfg.run.seed), static_cast<float>(cfg.model.init_std));
    std::vector<const void*> weights;
    for (int u = 0; u < g.model().unit_count(); ++u) weights.push_back(params.compute_weights(u));
    g.generate(weights, {rows.front()}, SamplingOptions{}, 2, 1, 0, -1);   // warm-up
    Kokkos::fence();
    const auto t0 = std::chrono::steady_clock::now();
    std::int64_t tokens = 0;
    GenerationStats st;
    // Static: consecutive batches of `capacity` rows; paged: every row in one call.
    const int batch = engine == RolloutEngine::paged ? R : capacity;
    for (int first = 0; first < R; first += batch) {
      const std::vector<GenerationRow> part(rows.begin() + first, rows.begin() + std::min(R, first + batch));
      for (const auto& c : g.generate(weights, part, SamplingOptions{}, max_new, 1, 1, -1))
        tokens += static_cast<std::int64_t>(c.tokens.size());
      const GenerationStats& call = g.last_stats();
      st.prefill_tokens += call.prefill_tokens;
      st.prefill_s += call.prefill_s;
      st.decode_steps += call.decode_steps;
      st.decode_s += call.decode_s;
      st.sparse_steps += call.sparse_steps;
      st.preemptions += call.preemptions;
      st.kv_bytes = call.kv_bytes;
      st.kv_peak_bytes = std::max(st.kv_peak_bytes, call.kv_peak_bytes);
    }
    Kokkos::fence();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << fmt::format(
        "  {:6s}: {} tokens in {:.3f} s, {:.0f} tokens/s | prefill {} tokens in {:.3f} s ({:.0f} tokens/s) | {} "
        "decode steps ({:.3f} s), {:.0f}% with under half of {} rows | {} preemptions | KV cache {:.1f} MiB, at "
        "most {:.1f} MiB in use\n",
        engine == RolloutEngine::paged ? "paged" : "static", tokens, s, tokens / s, st.prefill_tokens, st.prefill_s,
        st.prefill_s > 0 ? st.prefill_tokens / st.prefill_s : 0.0, st.decode_steps, st.decode_s,
        st.decode_steps > 0 ? 100.0 * st.sparse_steps / st.decode_steps : 0.0, capacity, st.preemptions,
        st.kv_bytes / double(1 << 20), st.kv_peak_bytes / double(1 << 20));
  }
  return 0;
}
