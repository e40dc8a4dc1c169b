// Causal attention, forward and backward, every implementation on the same inputs: the
// tensor-core kernels (kernels/flash_attention.hpp; GPU builds, bf16, head dim 64 or 128),
// cuDNN's fused attention (kernels/cudnn_attention.hpp; GPU builds with cuDNN: its outputs and
// gradients are also compared with the flash kernels', and its backward run twice for
// bit-identical gradients), the
// batched-GEMM attention (model/gemm_attention.hpp) and the fused per-row kernels
// (kernels/attention.hpp). Prints milliseconds and the useful (causal) TFLOP/s of each.
//   bench_attention [--batch B] [--seq S] [--heads H] [--kv-heads G] [--head-dim D] [--bf16|--fp32]
//                   [--reps N] [--skip-fused] [--skip-gemm] [--cudnn-workspace-mib M]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>
#include <iostream>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/attention.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"
#include "model/gemm_attention.hpp"

using namespace shardrl;

namespace {

template <class F>
double time_ms(F&& f, int reps) {
  f();   // warm-up (cuBLAS heuristics, first launches)
  Kokkos::fence();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  Kokkos::fence();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void* stream_of([[maybe_unused]] const ExecSpace& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  return space.cuda_stream();
#else
  return nullptr;
#endif
}

using BView = Kokkos::View<bf16*, MemSpace>;

// Largest |a - b| and largest |b| over two device arrays.
std::pair<double, double> max_diff(const BView& a, const BView& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double d = 0, m = 0;
  for (std::size_t i = 0; i < ha.size(); ++i) {
    d = std::max(d, std::abs(double(float(ha(i))) - double(float(hb(i)))));
    m = std::max(m, std::abs(double(float(hb(i)))));
  }
  return {d, m};
}

bool bit_equal(const BView& a, const BView& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  return std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(bf16)) == 0;
}

// cuDNN on the flash run's inputs; out, dq, dk, dv hold the flash kernels' results.
void run_cudnn(const kernels::AttentionShape& s, int reps, const BView& q, const BView& k, const BView& v,
               const BView& f_out, const BView& dout, const BView& f_dq, const BView& f_dk, const BView& f_dv,
               double fwd_flops, std::size_t budget) {
  kernels::CudnnAttention cudnn;
  if (!cudnn.prepare(s, true, budget)) {
    std::cout << "  cudnn  not available for this shape: " << cudnn.why() << "\n";
    return;
  }
  const std::size_t ws_bytes = cudnn.workspace_bytes(s);
  const ExecSpace space;
  const long qn = q.size(), kvn = k.size();
  BView out("c_out", qn), dq("c_dq", qn), dk("c_dk", kvn), dv("c_dv", kvn), dq2("c_dq2", qn), dk2("c_dk2", kvn),
      dv2("c_dv2", kvn);
  Kokkos::View<float*, MemSpace> lse("c_lse", long(s.B) * s.S * s.n_heads), delta("c_delta", lse.size());
  Kokkos::View<char*, MemSpace> ws("c_ws", std::max<std::size_t>(ws_bytes, 1));
  const double ff = time_ms([&] {
    cudnn.forward(stream_of(space), s, q.data(), k.data(), v.data(), out.data(), lse.data(), ws.data());
  }, reps);
  const double fb = time_ms([&] {
    cudnn.backward(stream_of(space), s, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                   dk.data(), dv.data(), delta.data(), ws.data());
  }, reps);
  cudnn.backward(stream_of(space), s, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq2.data(),
                 dk2.data(), dv2.data(), delta.data(), ws.data());
  Kokkos::fence();
  std::cout << fmt::format("  cudnn  forward {:9.3f} ms {:7.2f} TFLOP/s | backward {:9.3f} ms {:7.2f} TFLOP/s "
                           "(workspace {:.1f} MiB)\n",
                           ff, fwd_flops / ff / 1e9, fb, 2 * fwd_flops / fb / 1e9, ws_bytes / double(1 << 20));
  for (const auto& [name, a, b] : {std::tuple{"out", out, f_out}, std::tuple{"dq", dq, f_dq},
                                    std::tuple{"dk", dk, f_dk}, std::tuple{"dv", dv, f_dv}}) {
    const auto [d, m] = max_diff(a, b);
    std::cout << fmt::format("    cudnn - flash {:<3}: max |diff| {:.3g} (max |flash| {:.3g})\n", name, d, m);
  }
  std::cout << fmt::format("    cudnn backward run twice: {}\n",
                           bit_equal(dq, dq2) && bit_equal(dk, dk2) && bit_equal(dv, dv2) ? "bit-identical"
                                                                                           : "DIFFERENT");
}

template <class T>
int run(const kernels::AttentionShape& s, int reps, bool skip_fused, bool skip_gemm, std::size_t cudnn_budget) {
  const long tokens = static_cast<long>(s.B) * s.S;
  const long qn = tokens * s.n_heads * s.hd, kvn = tokens * s.n_kv_heads * s.hd;
  Kokkos::View<T*, MemSpace> q("q", qn), k("k", kvn), v("v", kvn), out("out", qn), dout("dout", qn), dq("dq", qn),
      dk("dk", kvn), dv("dv", kvn);
  Kokkos::View<float*, MemSpace> lse("lse", tokens * s.n_heads);
  Kokkos::View<std::int32_t*, MemSpace> pos("positions", tokens);
  const int S = s.S;
  Kokkos::parallel_for(
      "init", Kokkos::RangePolicy<ExecSpace>(0, qn), KOKKOS_LAMBDA(const long i) {
        q(i) = T(0.01f * static_cast<float>(i % 97) - 0.48f);
        dout(i) = T(0.01f * static_cast<float>(i % 89) - 0.44f);
        if (i < kvn) {
          k(i) = T(0.01f * static_cast<float>(i % 83) - 0.41f);
          v(i) = T(0.01f * static_cast<float>(i % 79) - 0.39f);
        }
        if (i < tokens) pos(i) = static_cast<std::int32_t>(i % S);
      });
  const ExecSpace space;
  // Useful FLOPs of causal attention: about half of the S x S products, 2 GEMMs forward, 4 backward
  // (the recomputed scores not counted), 2 flops per multiply-add.
  const double fwd_flops = 2.0 * 2.0 * s.B * s.n_heads * (0.5 * S * (S + 1.0)) * s.hd;
  const double bwd_flops = 2.0 * fwd_flops;
  auto report = [&](const char* name, double f_ms, double b_ms) {
    std::cout << fmt::format("  {:<6} forward {:9.3f} ms {:7.2f} TFLOP/s | backward {:9.3f} ms {:7.2f} TFLOP/s\n",
                             name, f_ms, fwd_flops / f_ms / 1e9, b_ms, bwd_flops / b_ms / 1e9);
  };
  std::cout << fmt::format("attention B={} S={} heads={}/{} hd={} {} on {}\n", s.B, S, s.n_heads, s.n_kv_heads, s.hd,
                           sizeof(T) == 2 ? "bf16" : "fp32", execution_space_name());
  double gf = 0, gb = 0;
  if constexpr (std::is_same_v<T, bf16>) {
    if (kernels::flash_attention_available() && kernels::flash_attention_supports_head_dim(s.hd)) {
      Kokkos::View<float*, MemSpace> delta("delta", kernels::flash_attention_backward_workspace_bytes(s) / 4);
      const double ff = time_ms([&] {
        kernels::flash_attention_forward(stream_of(space), s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                         lse.data());
      }, reps);
      const double fb = time_ms([&] {
        kernels::flash_attention_backward(stream_of(space), s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                          lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), delta.data());
      }, reps);
      report("flash", ff, fb);
      if (kernels::cudnn_attention_available()) run_cudnn(s, reps, q, k, v, out, dout, dq, dk, dv, fwd_flops, cudnn_budget);
    }
  }
  if (!skip_gemm) {
    Gemm gemm{ExecSpace()};
    const AttentionWorkspaceSizes wb = attention_workspace_bytes(s, sizeof(T), true);
    Kokkos::View<float*, MemSpace> scores("scores", wb.scores / 4), wdk("wdk", wb.dkv / 4), wdv("wdv", wb.dkv / 4);
    Kokkos::View<char*, MemSpace> probs("probs", wb.probs);
    reserve_attention_gemms(gemm, s);
    const AttentionWorkspace ws{scores.data(), probs.data(), wdk.data(), wdv.data()};
    std::cout << fmt::format("  (GEMM workspace {:.1f} MiB)\n", (wb.scores + wb.probs + 2 * wb.dkv) / double(1 << 20));
    gf = time_ms([&] {
      gemm_attention_forward<T>(space, gemm, s, pos.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), ws);
    }, reps);
    gb = time_ms([&] {
      gemm_attention_backward<T>(space, gemm, s, pos.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                                 dout.data(), dq.data(), dk.data(), dv.data(), ws);
    }, reps);
    report("gemm", gf, gb);
  }
  if (!skip_fused) {
    const double ff = time_ms([&] {
      kernels::attention_forward<T>(space, s, pos.data(), q.data(), k.data(), v.data(), out.data(), lse.data());
    }, reps);
    const double fb = time_ms([&] {
      kernels::attention_backward<T>(space, s, pos.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                                     dout.data(), dq.data(), dk.data(), dv.data());
    }, reps);
    report("fused", ff, fb);
    if (!skip_gemm)
      std::cout << fmt::format("  fused / gemm time: forward {:.2f}x, backward {:.2f}x\n", ff / gf, fb / gb);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardrl attention benchmark: tensor-core, batched-GEMM and fused per-row attention"};
  kernels::AttentionShape s{1, 2048, 32, 8, 64};   // llama-1b
  int reps = 5;
  bool fp32 = false, skip_fused = false, skip_gemm = false;
  app.add_option("--batch", s.B, "Rows")->check(CLI::PositiveNumber);
  app.add_option("--seq", s.S, "Tokens per row")->check(CLI::PositiveNumber);
  app.add_option("--heads", s.n_heads, "Query heads")->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", s.n_kv_heads, "Key/value heads")->check(CLI::PositiveNumber);
  app.add_option("--head-dim", s.hd, "Head dimension")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "Timed repetitions")->check(CLI::PositiveNumber);
  app.add_flag("--fp32", fp32, "fp32 instead of bf16");
  long cudnn_mib = 1 << 20;
  app.add_option("--cudnn-workspace-mib", cudnn_mib, "cuDNN backward's workspace at most (rows in calls that fit)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--skip-fused", skip_fused, "Leave out the fused per-row kernels (slow)");
  app.add_flag("--skip-gemm", skip_gemm, "Leave out the batched-GEMM attention (its S x S workspace)");
  CLI11_PARSE(app, argc, argv);
  if (s.n_heads % s.n_kv_heads != 0) {
    std::cerr << "bench_attention: --heads must be a multiple of --kv-heads\n";
    return 2;
  }
  KokkosRuntime kokkos(0);
  const std::size_t budget = static_cast<std::size_t>(cudnn_mib) << 20;
  return fp32 ? run<float>(s, reps, skip_fused, skip_gemm, budget) : run<bf16>(s, reps, skip_fused, skip_gemm, budget);
}
