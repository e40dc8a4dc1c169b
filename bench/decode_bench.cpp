// Decode throughput on one device: rows generating together through the KV cache after a
// batched prefill of their prompts. Prints generated tokens/s for each batch size (the
// prefill's time included), the prefill's own prompt tokens/s, and the memory-bandwidth bound:
// every decode step reads all weights and each row's KV cache once, at the device's measured
// copy bandwidth (bytes read + written per second by a 1 GiB device copy). The peer is
// bench/hf_generate.py.
//   bench_decode [--config F] [--set k=v ...] [--batch B ...] [--new-tokens N] [--prompt-tokens P]
//                [--gemm-decode] [--unsplit-attention] [--heads-apart]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "bench_config.hpp"
#include "core/kokkos.hpp"
#include "model/dense_parameters.hpp"
#include "rollout/generator.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_profiler_api.h>
#endif

using namespace shardrl;

int main(int argc, char** argv) {
  CLI::App app{"shardrl decode benchmark: generated tokens/s through the KV cache"};
  BenchConfigArgs config_args;
  std::vector<int> batches = {1, 8, 64};
  int new_tokens = 32, prompt = 4;
  config_args.add_to(app);
  app.add_option("--batch", batches, "Batch sizes (rows generating together)");
  app.add_option("--new-tokens", new_tokens, "Tokens generated per row")->check(CLI::PositiveNumber);
  app.add_option("--prompt-tokens", prompt, "Prompt length per row")->check(CLI::PositiveNumber);
  bool adapter_path = false;
  app.add_flag("--lora-adapter-path", adapter_path,
               "With lora.rank > 0: decode through the adapters instead of folding them into the weights first "
               "(as rollout does)");
  bool gemm_decode = false;
  app.add_flag("--gemm-decode", gemm_decode,
               "Decode steps' linear layers through the GEMMs (cuBLAS), not the matrix-vector kernels of few-row "
               "steps: the baseline of those kernels");
  bool unsplit_attention = false;
  app.add_flag("--unsplit-attention", unsplit_attention,
               "Decode attention with one CTA streaming each row's whole cache, not split over its positions: the "
               "baseline of the split");
  bool heads_apart = false;
  app.add_flag("--heads-apart", heads_apart,
               "A decode step's head work (norms, rotations, cache write) in a launch of its own, not in the "
               "attention's: the baseline of the one launch");
  CLI11_PARSE(app, argc, argv);
  Config cfg;
  if (!config_args.load("bench_decode", cfg)) return 2;
  KokkosRuntime kokkos(0);
  ModelOptions model = model_options(cfg);
  model.decode_gemv = !gemm_decode;
  model.decode_attention_split = !unsplit_attention;
  model.decode_heads_in_attention = !heads_apart;
  double copy_bw = 0;   // bytes moved (read + write) per second
  {
    Kokkos::View<char*, MemSpace> a("copy_a", std::size_t(1) << 30), b("copy_b", std::size_t(1) << 30);
    Kokkos::deep_copy(b, a);
    Kokkos::fence();
    const int reps = 5;
    auto c0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) Kokkos::deep_copy(b, a);
    Kokkos::fence();
    copy_bw = 2.0 * reps * double(a.extent(0)) /
              std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  }
  const ModelShape& shape = model.shape;
  const double weight_bytes = double(shape.parameter_count()) * (model.precision == Precision::bf16 ? 2 : 4);
  const double kv_bytes_per_token =
      2.0 * shape.n_layers * shape.n_kv_heads * shape.head_dim * (model.precision == Precision::bf16 ? 2 : 4);
  std::cout << fmt::format("copy bandwidth {:.2f} TB/s (read + write); weights {:.2f} GB\n", copy_bw / 1e12,
                           weight_bytes / 1e9);
  for (int batch : batches) {
    Generator gen(model, batch, prompt + new_tokens, ExecSpace());
    if (cfg.rollout.cuda_graph == RolloutGraph::decode) gen.use_decode_graphs();
    DenseParameters params(gen.model(), ExecSpace());
    params.initialize(static_cast<std::uint64_t>(cfg.run.seed), static_cast<float>(cfg.model.init_std));
    std::vector<const void*> weights;
    for (int u = 0; u < gen.model().unit_count(); ++u) weights.push_back(params.compute_weights(u));
    if (shape.lora.on() && !adapter_path) {   // as rollout's WeightSet::materialize does
      for (int u = 0; u < gen.model().unit_count(); ++u) gen.model().fold_adapters(u, const_cast<void*>(weights[u]));
      gen.model().set_adapters(false);
    }
    std::vector<GenerationRow> rows(batch);
    for (int r = 0; r < batch; ++r) {
      rows[r].prompt.assign(prompt, 97);
      rows[r].prompt[0] = 256;
      rows[r].sample_index = r;
    }
    // No EOS (-1): every row generates new_tokens, so the count of tokens is exact.
    gen.generate(weights, rows, SamplingOptions{}, 2, 1, 0, -1);   // warm-up
    Kokkos::fence();
    // Prefill alone: generating one token is the prefill plus one decode step.
    auto p0 = std::chrono::steady_clock::now();
    gen.generate(weights, rows, SamplingOptions{}, 1, 1, 0, -1);
    Kokkos::fence();
    const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    // The timed generation runs between cudaProfilerStart and cudaProfilerStop, so `ncu
    // --profile-from-start off` sees one prefill and new_tokens - 1 decode steps.
#if defined(KOKKOS_ENABLE_CUDA)
    cudaProfilerStart();
#endif
    auto t0 = std::chrono::steady_clock::now();
    auto out = gen.generate(weights, rows, SamplingOptions{}, new_tokens, 1, 1, -1);
    Kokkos::fence();
#if defined(KOKKOS_ENABLE_CUDA)
    cudaProfilerStop();
#endif
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    long tokens = 0;
    for (const auto& c : out) tokens += static_cast<long>(c.tokens.size());
    // Bound: per step, all weights plus each row's cache at its mean length, read once.
    const double step_bytes = weight_bytes + batch * (prompt + 0.5 * new_tokens) * kv_bytes_per_token;
    const double bound = batch / (step_bytes / copy_bw);
    // The decode steps alone: the timed run less its prefill and first token (which a long
    // prompt makes most of the run), against the same per-step bound.
    const double step_s = new_tokens > 1 ? (s - prefill_s) / (new_tokens - 1) : 0.0;
    std::cout << fmt::format(
        "{} {}{}{} on {}: batch {:3d}  {:6d} tokens in {:.3f} s  {:.0f} tokens/s  ({:.2f} ms per step; prefill + first "
        "token {:.1f} ms, {:.0f} prompt tokens/s) | bandwidth bound {:.0f} tokens/s: {:.0f}% | decode steps alone "
        "{:.3f} ms: {:.0f}%\n",
        cfg.model.preset, model.precision == Precision::bf16 ? "bf16" : "fp32", gemm_decode ? " (GEMM decode)" : "",
        heads_apart ? " (heads apart)" : "",
        execution_space_name(), batch, tokens, s, tokens / s, s / new_tokens * 1e3, prefill_s * 1e3,
        batch * prompt / prefill_s, bound, 100.0 * tokens / s / bound, step_s * 1e3,
        step_s > 0 ? 100.0 * step_bytes / copy_bw / step_s : 0.0);
  }
  return 0;
}
