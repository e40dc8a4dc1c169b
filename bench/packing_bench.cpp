// Padding against packing, measured: the same set of variable-length sequences trained as
// right-padded rows (one sequence per row of train.seq_len positions) and packed into as few
// rows as first-fit-decreasing allows. Prints real (non-padding) tokens/s of each.
//   bench_packing [--config F] [--set k=v ...] [--sequences N] [--min-length L] [--steps N]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <numeric>
#include <random>

#include "bench_config.hpp"
#include "core/kokkos.hpp"
#include "model/dense_parameters.hpp"
#include "model/transformer.hpp"

using namespace shardrl;

namespace {

struct Layout {
  int rows = 0, S = 0;
  std::vector<std::int32_t> tokens, targets, positions;
  std::vector<float> mask;
};

// Rows of S positions holding the given sequences (lists of lengths per row); the rest padding.
Layout make_layout(const std::vector<std::vector<int>>& rows, int S, int vocab, std::mt19937& gen) {
  Layout l;
  l.rows = static_cast<int>(rows.size());
  l.S = S;
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  for (const auto& row : rows) {
    int used = 0;
    for (int len : row) {
      for (int p = 0; p < len; ++p) {
        l.tokens.push_back(tok(gen));
        l.targets.push_back(tok(gen));
        l.positions.push_back(p);
        l.mask.push_back(1.0f);
      }
      used += len;
    }
    for (int p = 0; used < S; ++used, ++p) {   // padding continues the row's last sequence
      l.tokens.push_back(0);
      l.targets.push_back(0);
      l.positions.push_back(l.positions.empty() || used == 0 ? p : l.positions.back() + 1);
      l.mask.push_back(0.0f);
    }
  }
  return l;
}

double time_steps(const ModelOptions& base, const Layout& l, const Config& cfg, int steps) {
  ModelOptions o = base;
  o.max_batch = l.rows;
  o.max_seq_len = l.S;
  Transformer model(o, ExecSpace());
  DenseParameters params(model, ExecSpace());
  params.initialize(static_cast<std::uint64_t>(cfg.run.seed), static_cast<float>(cfg.model.init_std));
  model.set_batch(l.tokens.data(), l.targets.data(), l.rows, l.S, l.positions.data());
  DeviceView<float> mask("mask", l.mask.size()), loss("loss", 1);
  auto h = Kokkos::create_mirror_view(mask);
  for (std::size_t i = 0; i < l.mask.size(); ++i) h(i) = l.mask[i];
  Kokkos::deep_copy(mask, h);
  for (int i = 0; i < 2; ++i) forward_backward(model, params, mask.data(), 1.0f, loss.data());
  Kokkos::fence();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) forward_backward(model, params, mask.data(), 1.0f, loss.data());
  Kokkos::fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardrl padding vs packing benchmark"};
  BenchConfigArgs config_args;
  int sequences = 32, min_length = 0, steps = 5;
  config_args.add_to(app);
  app.add_option("--sequences", sequences, "Sequences in the batch")->check(CLI::PositiveNumber);
  app.add_option("--min-length", min_length, "Shortest sequence (default: train.seq_len / 8)");
  app.add_option("--steps", steps, "Timed steps")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  Config cfg;
  if (!config_args.load("bench_packing", cfg)) return 2;
  KokkosRuntime kokkos(0);
  const ModelOptions base = model_options(cfg);
  const int S = base.max_seq_len;
  if (min_length <= 0) min_length = std::max(1, S / 8);

  // Lengths uniform in [min_length, S], as completions of RL prompts vary.
  std::mt19937 gen(static_cast<unsigned>(cfg.run.seed));
  std::uniform_int_distribution<int> length(std::min(min_length, S), S);
  std::vector<int> lengths(sequences);
  for (auto& l : lengths) l = length(gen);
  const long real = std::accumulate(lengths.begin(), lengths.end(), 0L);

  std::vector<std::vector<int>> padded_rows, packed_rows;
  for (int l : lengths) padded_rows.push_back({l});
  std::vector<int> sorted = lengths, room;
  std::sort(sorted.rbegin(), sorted.rend());
  for (int l : sorted) {   // first fit decreasing
    std::size_t r = 0;
    while (r < room.size() && room[r] < l) ++r;
    if (r == room.size()) {
      packed_rows.emplace_back();
      room.push_back(S);
    }
    packed_rows[r].push_back(l);
    room[r] -= l;
  }

  double t_pad = time_steps(base, make_layout(padded_rows, S, base.shape.vocab_size, gen), cfg, steps);
  double t_pack = time_steps(base, make_layout(packed_rows, S, base.shape.vocab_size, gen), cfg, steps);
  std::cout << fmt::format(
      "{} sequences, lengths {}..{} (mean {:.0f}), rows of {} positions, {} on {}\n"
      "  padded  {:3d} rows  {:.0f}% padding  step {:8.3f} ms  {:.0f} real tokens/s\n"
      "  packed  {:3d} rows  {:.0f}% padding  step {:8.3f} ms  {:.0f} real tokens/s\n"
      "  packed/padded throughput {:.2f}x\n",
      sequences, *std::min_element(lengths.begin(), lengths.end()), *std::max_element(lengths.begin(), lengths.end()),
      double(real) / sequences, S, cfg.model.preset, execution_space_name(), padded_rows.size(),
      100.0 * (1.0 - double(real) / (double(padded_rows.size()) * S)), t_pad * 1e3, real / t_pad, packed_rows.size(),
      100.0 * (1.0 - double(real) / (double(packed_rows.size()) * S)), t_pack * 1e3, real / t_pack, t_pad / t_pack);
  return 0;
}
