// One fully-sharded training step (forward, backward, reduce-scatter, AdamW) on every rank, as
// the RL loop runs it, on random tokens: tokens/s per GPU, MFU and peak memory. The peer is
// bench/torch_fsdp2.py with the same shape, micro-batch, sequence length and step count.
//   mpirun -np N bench_train_step [--config F] [--set k=v ...] [--steps N] [--warmup N] [--collectives]
//                                 [--prompt-share P [--score-every-token]]
// --prompt-share: each row's first P x S positions are a prompt, unscored, as in the RL train
// phase, so the head runs on the rest only; --score-every-token runs it on all (the A/B).
// --collectives: the step runs with its phases fenced (FsdpOptions::profile, so slower), which
// times each all-gather and reduce-scatter alone; then plain collectives of the same sizes (every
// unit's, once per timed step, fenced alike) run in the same process: bus bandwidth of both; and
// the fenced phases per step (units' compute, optimizer, gathers, reduce-scatters, and of those the
// embedding's exchanges as rows), whose sum against the unfenced step says how much of the
// collectives the overlap hides.
// MFU counts 6 x parameters x tokens plus causal attention (6 x layers x heads x hd x S per
// token), against --peak-tflops (H100/H200 dense bf16: 989).
// On GPU builds the timed steps run between cudaProfilerStart and cudaProfilerStop, so
// `ncu --profile-from-start off` sees only them (bench/kernel_breakdown.py groups its kernels).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <array>
#include <chrono>
#include <iostream>
#include <random>

#include "bench_config.hpp"
#include "core/kokkos.hpp"
#include "core/memory_ledger.hpp"
#include "job/policy.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "fsdp/train_step_graphs.hpp"
#include "mpi/communicator.hpp"
#include "mpi/device.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#endif

using namespace shardrl;

namespace {

// Bus bandwidth (NCCL's definition for all-gather and reduce-scatter): (W - 1) / W of the full
// buffer's bytes per second.
double bus_gbps(double full_bytes, double seconds, int ranks) {
  return seconds > 0 ? (ranks - 1.0) / ranks * full_bytes / seconds / 1e9 : 0.0;
}

// Every unit's all-gather (compute type) and reduce-scatter (reduce type), `reps` times, each
// waited for: the plain collectives of the step's sizes. Returns {gather s, gather bytes, reduce
// s, reduce bytes}.
std::array<double, 4> plain_collectives(Communicator& comm, const ShardLayout& layout, std::size_t gather_bytes,
                                        std::size_t reduce_bytes, int reps) {
  const std::size_t widest = std::max(gather_bytes, reduce_bytes);
  DeviceView<char> shard("plain_shard", static_cast<std::size_t>(layout.max_shard()) * widest),
      full("plain_full", static_cast<std::size_t>(layout.max_padded()) * widest);
  const StreamRef stream = stream_of(ExecSpace());
  const DataType gather_type = gather_bytes == 2 ? DataType::bf16 : DataType::f32;
  const DataType reduce_type = reduce_bytes == 2 ? DataType::bf16 : DataType::f32;
  std::array<double, 4> out{0, 0, 0, 0};
  auto timed = [&](auto&& collective) {
    const auto t0 = std::chrono::steady_clock::now();
    collective();
    comm.synchronize(stream);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  Kokkos::fence();
  for (int r = 0; r < reps; ++r)
    for (int u = 0; u < layout.unit_count(); ++u) {
      const auto n = static_cast<std::size_t>(layout.unit(u).shard);
      out[0] += timed([&] { comm.all_gather(shard.data(), full.data(), n, gather_type, stream); });
      out[1] += static_cast<double>(layout.unit(u).padded) * gather_bytes;
      out[2] += timed([&] { comm.reduce_scatter(full.data(), shard.data(), n, reduce_type, ReduceOp::sum, stream); });
      out[3] += static_cast<double>(layout.unit(u).padded) * reduce_bytes;
    }
  return out;
}

// What the head scores of each row: with prompt_share p > 0 its first p * S positions are a
// prompt (unscored and masked, as the RL job's are), and the head runs on the rest only unless
// every_token (Transformer::score_every_token) makes it run on every position.
struct Scoring {
  double prompt_share = 0;
  bool every_token = false;
};

int run(const Config& cfg, int steps, int warmup, double peak_tflops, bool collectives, const Scoring& scoring,
        const ProcessLayout& layout) {
  const int rank = layout.world_rank, ranks = layout.world_size;
  auto comm = make_communicator(kDeviceIsGpu ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD,
                                cfg.comm.timeout_s);
  Policy policy(cfg, *comm, PolicyUse{false, collectives, {}});   // as `shardrl train` builds it
  Transformer& model = policy.model();
  ShardedTrainer& trainer = policy.trainer();
  const ModelOptions& o = model.options();
  const int B = o.max_batch, S = o.max_seq_len;

  std::mt19937 gen(static_cast<unsigned>(cfg.run.seed) + static_cast<unsigned>(rank));
  std::uniform_int_distribution<int> tok(0, o.shape.vocab_size - 1);
  std::vector<std::int32_t> tokens(B * S), targets(B * S);
  for (auto& t : tokens) t = tok(gen);
  for (auto& t : targets) t = tok(gen);
  const int prompt = static_cast<int>(scoring.prompt_share * S);
  DeviceView<float> mask("mask", B * S), loss("loss", 1);
  auto mask_h = Kokkos::create_mirror_view(mask);
  for (int i = 0; i < B * S; ++i) {
    const bool scored = i % S >= prompt;
    if (!scored) targets[i] = kUnscoredTarget;
    mask_h(i) = scored ? 1.0f : 0.0f;
  }
  model.score_every_token(scoring.every_token);
  model.set_batch(tokens.data(), targets.data(), B, S);
  Kokkos::deep_copy(mask, mask_h);
  const MaskedNll objective(mask.data(), 1.0f / (float(B) * S * ranks), loss.data());
  // train.cuda_graph = "full": the same step captured once and replayed (the inputs do not
  // change, so nothing is staged between steps but the one micro-batch, once).
  std::unique_ptr<TrainStepGraphs> graphs;
  if (cfg.train.cuda_graph == TrainGraph::full) {
    const std::vector<DeviceRegion> inputs{{mask.data(), mask.extent(0) * sizeof(float)}};
    graphs = std::make_unique<TrainStepGraphs>(trainer, model, inputs, 1);
    graphs->stage(0);
  }
  auto step = [&] {
    if (graphs) {
      graphs->step("bench", 1, objective);
      return;
    }
    trainer.forward_backward(objective);
    trainer.optimizer_step();
  };
  for (int i = 0; i < warmup; ++i) step();
  Kokkos::fence();
  MPI_Barrier(MPI_COMM_WORLD);
  trainer.reset_profile();
#if defined(KOKKOS_ENABLE_CUDA)
  cudaProfilerStart();
#endif
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  Kokkos::fence();
#if defined(KOKKOS_ENABLE_CUDA)
  cudaProfilerStop();
#endif
  MPI_Barrier(MPI_COMM_WORLD);
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;

  const ModelShape& s = o.shape;
  const double params = static_cast<double>(s.parameter_count());
  const double flops_per_token = 6.0 * params + 6.0 * s.n_layers * s.n_heads * s.head_dim * double(S);
  const double tokens_per_gpu = double(B) * S / step_s;
  double peak_bytes = static_cast<double>(MemoryLedger::instance().peak());
  MPI_Allreduce(MPI_IN_PLACE, &peak_bytes, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // The device's own count after the steps: the ledger's buffers and what it does not hold (the
  // CUDA context, NCCL's communicators, cuBLAS's and cuDNN's workspaces).
  double device_used = 0;
#if defined(KOKKOS_ENABLE_CUDA)
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) device_used = double(total_bytes - free_bytes);
#endif
  MPI_Allreduce(MPI_IN_PLACE, &device_used, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::cout << fmt::format(
        "shardrl train step | model {} ({:.3f}B params, {}) | {} rank(s), micro-batch {} x {} per rank | {}{}{}\n"
        "  step {:.1f} ms | {:.0f} tokens/s per GPU | MFU {:.1f}% (of {} TFLOP/s) | peak ledger {:.2f} GiB per rank\n",
        cfg.model.preset, params / 1e9, o.precision == Precision::bf16 ? "bf16" : "fp32", ranks, B, S,
        execution_space_name(), graphs ? " | CUDA graph" : "",
        prompt > 0 ? fmt::format(" | first {} positions a prompt, the head on {} (MFU counts it on all)", prompt,
                                 model.head_rows() == B * S ? "every token" : "the others")
                   : "",
        step_s * 1e3, tokens_per_gpu,
        100.0 * tokens_per_gpu * flops_per_token / (peak_tflops * 1e12),
        peak_tflops, peak_bytes / double(1ull << 30));
  if (rank == 0 && device_used > 0)
    std::cout << fmt::format("  device memory in use after the steps (cudaMemGetInfo): {:.2f} GiB per rank\n",
                             device_used / double(1ull << 30));
  if (collectives) {
    // Rank 0's view; the collectives are the same on every rank.
    const StepProfile p = trainer.profile();
    const std::size_t reduce_bytes = cfg.fsdp.reduce_dtype == GradDtype::bf16 ? 2 : 4;
    const auto plain = plain_collectives(*comm, trainer.layout(), model.compute_type_size(), reduce_bytes, steps);
    if (rank == 0) {
      const double step_ag = bus_gbps(double(p.all_gather_bytes), p.gather_s, ranks);
      const double step_rs = bus_gbps(double(p.reduce_scatter_bytes), p.reduce_s, ranks);
      const double plain_ag = bus_gbps(plain[1], plain[0], ranks), plain_rs = bus_gbps(plain[3], plain[2], ranks);
      std::cout << fmt::format(
          "  in the step (fenced): {} all-gathers {:.2f} GB in {:.1f} ms, bus {:.1f} GB/s | {} reduce-scatters "
          "{:.2f} GB in {:.1f} ms, bus {:.1f} GB/s\n"
          "  plain {} collectives, same sizes: all-gather bus {:.1f} GB/s ({:.0f}% achieved in the step) | "
          "reduce-scatter bus {:.1f} GB/s ({:.0f}%)\n"
          "  fenced phases per step: units' compute {:.1f} ms | optimizer {:.1f} ms | all-gathers {:.1f} ms | "
          "reduce-scatters {:.1f} ms | of the collectives, the embedding's rows {:.1f} ms\n",
          p.all_gathers, p.all_gather_bytes / 1e9, p.gather_s * 1e3, step_ag, p.reduce_scatters,
          p.reduce_scatter_bytes / 1e9, p.reduce_s * 1e3, step_rs, comm->backend_name(), plain_ag,
          plain_ag > 0 ? 100.0 * step_ag / plain_ag : 0.0, plain_rs, plain_rs > 0 ? 100.0 * step_rs / plain_rs : 0.0,
          p.compute_s * 1e3 / steps, p.optimizer_s * 1e3 / steps, p.gather_s * 1e3 / steps, p.reduce_s * 1e3 / steps,
          p.lookup_s * 1e3 / steps);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardrl fully-sharded train step benchmark (run under mpirun)"};
  BenchConfigArgs config_args;
  int steps = 10, warmup = 3;
  double peak = 989.0;
  bool collectives = false;
  config_args.add_to(app);
  app.add_flag("--collectives", collectives,
               "Fence the step's phases to time its collectives, then time plain ones of the same sizes");
  app.add_option("--steps", steps, "Timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--peak-tflops", peak, "Dense bf16 peak of one GPU, for MFU")->check(CLI::PositiveNumber);
  Scoring scoring;
  app.add_option("--prompt-share", scoring.prompt_share,
                 "Share of each row that is a prompt, not scored (the head skips it)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_flag("--score-every-token", scoring.every_token,
               "The head on every token, the prompt's included (as a captured step runs it)");
  CLI11_PARSE(app, argc, argv);

  MpiSession mpi(&argc, &argv);
  ProcessLayout layout = ProcessLayout::discover(mpi.world());
  Config cfg;
  if (!config_args.load("bench_train_step", cfg)) return 2;
  DeviceBinding device = bind_device(layout);
  KokkosRuntime kokkos(device.device_id);
  return run(cfg, steps, warmup, peak, collectives, scoring, layout);
}
