// Forward+backward throughput of the model on one device: tokens/s, and GEMM FLOP/s both over
// the whole step and for the step's largest GEMM alone. The model comes from a config file
// and --set overrides, exactly as in a job.
//   bench_model [--config F] [--set k=v ...] [--steps N] [--warmup N]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <random>

#include "bench_config.hpp"
#include "core/kokkos.hpp"
#include "model/dense_parameters.hpp"
#include "model/transformer.hpp"

using namespace shardrl;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const Config& cfg, int steps, int warmup) {
  ModelOptions o = model_options(cfg);
  const int B = o.max_batch, S = o.max_seq_len;
  Transformer model(o, ExecSpace());
  DenseParameters params(model, ExecSpace());
  params.initialize(static_cast<std::uint64_t>(cfg.run.seed), static_cast<float>(cfg.model.init_std));

  std::mt19937 gen(static_cast<unsigned>(cfg.run.seed));
  std::uniform_int_distribution<int> tok(0, o.shape.vocab_size - 1);
  std::vector<std::int32_t> tokens(B * S), targets(B * S);
  for (auto& t : tokens) t = tok(gen);
  for (auto& t : targets) t = tok(gen);
  model.set_batch(tokens.data(), targets.data(), B, S);
  DeviceView<float> mask("mask", B * S), loss("loss", 1);
  Kokkos::deep_copy(mask, 1.0f);

  for (int i = 0; i < warmup; ++i) forward_backward(model, params, mask.data(), 1.0f / (B * S), loss.data());
  Kokkos::fence();
  const double flops_before = model.gemm().counters().flops;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) forward_backward(model, params, mask.data(), 1.0f / (B * S), loss.data());
  Kokkos::fence();
  const double step_s = seconds_since(t0) / steps;
  const double gemm_flops = (model.gemm().counters().flops - flops_before) / steps;

  // The step's largest GEMM (MLP up projection, N x d_ff x d_model) alone, in the compute type.
  const int N = B * S, F = o.shape.d_ff, D = o.shape.d_model;
  const bool half = o.precision == Precision::bf16;
  Kokkos::View<char*, MemSpace> a("a", std::size_t(N) * D * 4), w("w", std::size_t(F) * D * 4),
      c("c", std::size_t(N) * F * 4);
  auto one_gemm = [&] {
    if (half)
      model.gemm().gemm(Op::N, Op::T, N, F, D, 1.0f, reinterpret_cast<bf16*>(a.data()), D,
                        reinterpret_cast<bf16*>(w.data()), D, 0.0f, reinterpret_cast<bf16*>(c.data()), F);
    else
      model.gemm().gemm(Op::N, Op::T, N, F, D, 1.0f, reinterpret_cast<float*>(a.data()), D,
                        reinterpret_cast<float*>(w.data()), D, 0.0f, reinterpret_cast<float*>(c.data()), F);
  };
  one_gemm();
  Kokkos::fence();
  const int reps = 10;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) one_gemm();
  Kokkos::fence();
  const double gemm_s = seconds_since(t0) / reps;

  std::cout << fmt::format(
      "model {} ({} params, {}), batch {}x{}, recompute {}, {}\n"
      "  fwd+bwd step      {:.3f} ms   {:.0f} tokens/s\n"
      "  GEMM work/step    {:.3f} GFLOP   {:.2f} GFLOP/s over the whole step\n"
      "  largest GEMM      {}x{}x{}   {:.2f} GFLOP/s alone\n"
      "  activations       {:.1f} MiB\n",
      cfg.model.preset, o.shape.parameter_count(), half ? "bf16" : "fp32", B, S, o.activation_recompute ? "on" : "off",
      execution_space_name(), step_s * 1e3, N / step_s, gemm_flops / 1e9, gemm_flops / step_s / 1e9, N, F, D,
      2.0 * N * F * D / gemm_s / 1e9, model.activation_bytes() / double(1 << 20));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardrl model benchmark: forward+backward tokens/s and GEMM FLOP/s on one device"};
  BenchConfigArgs config_args;
  int steps = 10, warmup = 2;
  config_args.add_to(app);
  app.add_option("--steps", steps, "Timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  Config cfg;
  if (!config_args.load("bench_model", cfg)) return 2;
  KokkosRuntime kokkos(0);
  return run(cfg, steps, warmup);
}
