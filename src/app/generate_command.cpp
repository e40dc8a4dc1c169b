#include "app/generate_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "app/cli.hpp"
#include "app/job_config.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "config/model_shape.hpp"
#include "core/log.hpp"
#include "io/sharded_file.hpp"
#include "model/dense_parameters.hpp"
#include "mpi/device.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/generator.hpp"

namespace shardrl {
namespace {

// One line per completion: newlines, backslashes and other control bytes escaped.
std::string one_line(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

// "1 2 3" or "1,2,3": every id an integer in [0, vocab_size).
std::vector<std::int32_t> parse_prompt_ids(const std::string& text, std::int64_t vocab_size) {
  std::vector<std::int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    const std::string where = fmt::format("--prompt-ids: id {} (\"{}\")", ids.size(), token);
    if (token.find_first_not_of("0123456789") != std::string::npos || token.size() > 10)
      throw InputError(where + " is not a non-negative integer");
    const long long v = std::stoll(token);
    if (v >= vocab_size)
      throw InputError(fmt::format("{} is outside the model's vocabulary (model.vocab_size = {})", where, vocab_size));
    ids.push_back(static_cast<std::int32_t>(v));
    token.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t') flush();
    else token += c;
  }
  flush();
  if (ids.empty()) throw InputError("--prompt-ids: no ids");
  return ids;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  ProcessLayout layout = ProcessLayout::discover(mpi.world());
  init_logging(layout.world_rank, false);
  spdlog::set_level(spdlog::level::warn);   // stdout carries the completions only

  if (args.config_path.empty() && args.checkpoint.empty()) {
    if (layout.world_rank == 0) std::cerr << "shardrl: generate needs --config or --checkpoint (or both)\n";
    return kExitUsage;
  }
  std::unique_ptr<ShardedFileReader> checkpoint;
  LoadedConfig loaded;
  try {
    if (!args.checkpoint.empty()) checkpoint = std::make_unique<ShardedFileReader>(args.checkpoint, mpi.world());
    if (!args.config_path.empty()) {
      TrainArgs job;
      job.config_path = args.config_path;
      job.overrides = args.overrides;
      loaded = read_job_config(mpi.world(), job, layout.world_size);
    } else {
      loaded = parse_job_config(checkpoint->read_string("/meta/config"), args.checkpoint + ":/meta/config",
                                args.overrides, layout.world_size);
    }
  } catch (const InputError& e) {
    if (layout.world_rank == 0) std::cerr << "shardrl: " << e.what() << "\n";
    return kExitUsage;
  }
  if (!loaded.ok()) {
    report_config_errors(loaded, layout.world_rank);
    return kExitUsage;
  }
  const Config& cfg = loaded.config;
  DeviceBinding device;
  try {
    device = bind_device(layout);
  } catch (const InputError& e) {
    if (layout.world_rank == 0) std::cerr << "shardrl: " << e.what() << "\n";
    return kExitUsage;
  }
  KokkosRuntime kokkos(device.device_id);

  if (args.prompt.empty() == args.prompt_ids.empty()) {
    if (layout.world_rank == 0) std::cerr << "shardrl: generate needs --prompt TEXT or --prompt-ids \"ID ...\"\n";
    return kExitUsage;
  }
  const bool by_ids = !args.prompt_ids.empty();
  std::vector<std::int32_t> prompt;
  if (by_ids) {
    try {
      prompt = parse_prompt_ids(args.prompt_ids, resolve_model_shape(cfg.model).vocab_size);
    } catch (const InputError& e) {
      if (layout.world_rank == 0) std::cerr << "shardrl: " << e.what() << "\n";
      return kExitUsage;
    }
  } else {
    prompt.push_back(tokenizer::kBos);
    for (std::int32_t t : tokenizer::encode(args.prompt)) prompt.push_back(t);
  }
  const std::int32_t eos = cfg.rl.eos_id >= 0 ? static_cast<std::int32_t>(cfg.rl.eos_id) : tokenizer::kEos;
  const int max_new = static_cast<int>(cfg.rollout.max_new_tokens);
  ModelOptions model = model_options(cfg);
  const int max_len = static_cast<int>(prompt.size()) + max_new;
  if (max_len > model.shape.max_seq_len) {
    if (layout.world_rank == 0)
      std::cerr << "shardrl: the prompt (" << prompt.size() << " tokens) and rollout.max_new_tokens (" << max_new
                << ") exceed the model's max_seq_len (" << model.shape.max_seq_len << ")\n";
    return kExitUsage;
  }
  Generator generator(model, args.samples, max_len, ExecSpace());
  if (cfg.rollout.cuda_graph == RolloutGraph::decode) generator.use_decode_graphs();
  DenseParameters params(generator.model(), ExecSpace());
  params.initialize(static_cast<std::uint64_t>(cfg.run.seed), static_cast<float>(cfg.model.init_std));
  if (checkpoint) {   // every parameter whole, on this process
    try {
      for (int u = 0; u < generator.model().unit_count(); ++u) {
        std::vector<float> unit(static_cast<std::size_t>(params.numel(u)), 0.0f);
        for (const ParamSpec& p : generator.model().units()[u].params)
          checkpoint->read("/model/" + p.name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()), 0,
                           static_cast<std::uint64_t>(p.numel()), unit.data() + p.offset,
                           cfg.checkpoint.verify && layout.world_size == 1);   // verify needs disjoint ranges
        Kokkos::deep_copy(Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              params.main_weights(u), unit.size()),
                          Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              unit.data(), unit.size()));
      }
    } catch (const InputError& e) {
      if (layout.world_rank == 0) std::cerr << "shardrl: " << e.what() << "\n";
      return kExitUsage;
    }
    params.refresh_compute_weights();
  }
  std::vector<const void*> weights;
  for (int u = 0; u < generator.model().unit_count(); ++u) weights.push_back(params.compute_weights(u));

  std::vector<GenerationRow> rows(args.samples);
  for (int i = 0; i < args.samples; ++i) {
    rows[i].prompt = prompt;
    rows[i].sample_index = i;
  }
  SamplingOptions sampling{static_cast<float>(cfg.rollout.temperature), static_cast<int>(cfg.rollout.top_k),
                           static_cast<float>(cfg.rollout.top_p)};
  std::vector<Completion> out = generator.generate(weights, rows, sampling, max_new,
                                                   static_cast<std::uint64_t>(cfg.run.seed), 0, eos);
  if (layout.world_rank == 0)
    for (const auto& c : out) {
      const auto end = std::find(c.tokens.begin(), c.tokens.end(), eos);
      const std::vector<std::int32_t> kept(c.tokens.begin(), end);
      if (by_ids) std::cout << fmt::format("{}", fmt::join(kept, " ")) << "\n";
      else std::cout << one_line(tokenizer::decode_completion(kept)) << "\n";
    }
  std::cout.flush();
  return kExitOk;
}

}  // namespace shardrl
