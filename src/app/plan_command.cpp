#include "app/plan_command.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <regex>

#include "app/cli.hpp"
#include "app/job_config.hpp"
#include "config/model_presets.hpp"
#include "core/error.hpp"
#include "core/memory_capacity.hpp"
#include "job/memory_plan.hpp"
#include "mpi/session.hpp"

namespace shardrl {
namespace {

double gib(double bytes) { return bytes / double(1ull << 30); }

void print_part(const char* title, const std::vector<MemoryTerm>& terms, const char* note) {
  std::cout << fmt::format("  {:9.3f} GiB  {}{}\n", gib(bytes_of(terms)), title, note);
  for (const MemoryTerm& t : terms) std::cout << fmt::format("      {:9.3f} GiB  {}\n", gib(t.bytes), t.what);
}

}  // namespace

double parse_memory_size(const std::string& text, const std::string& flag) {
  static const std::regex size(R"(^\s*([0-9]+(\.[0-9]+)?)\s*(TiB|GiB|MiB|TB|GB|MB)?\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, size))
    throw InputError(fmt::format("{} {}: a size such as 80GiB, 141GB or 512MiB", flag, text));
  // strtod, not stod: a number too large for a double is refused by name, not an out_of_range.
  const double value = std::strtod(m[1].str().c_str(), nullptr);
  const std::string unit = m[3].matched ? m[3].str() : "GiB";
  const double scale = unit == "TiB" ? std::pow(2.0, 40) : unit == "GiB" ? std::pow(2.0, 30)
                       : unit == "MiB" ? std::pow(2.0, 20) : unit == "TB" ? 1e12 : unit == "GB" ? 1e9 : 1e6;
  if (value * scale < 1e6)   // a machine without memory: a typo, not a plan that does not fit
    throw InputError(fmt::format("{} {}: a size of at least 1MB, such as 80GiB, 141GB or 512MiB", flag, text));
  if (!std::isfinite(value * scale) || value * scale > 1e18)
    throw InputError(fmt::format("{} {}: a size such as 80GiB, 141GB or 512MiB (at most an exabyte)", flag, text));
  return value * scale;
}

int run_plan(const PlanArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  try {
    if (args.ranks < 1) throw InputError(fmt::format("--ranks {}: at least 1", args.ranks));
    const int per_node = args.ranks_per_node > 0 ? args.ranks_per_node : args.ranks;
    TrainArgs train;
    train.config_path = args.config_path;
    train.overrides = args.overrides;
    // With --gpu-memory the config is a GPU build's, checked as one whatever this build is (on a
    // CPU login node its CUDA graphs, flash attention or NCCL were refused as this build's).
    BuildInfo build = this_build();
    if (!args.gpu_memory.empty()) {
      build.has_cuda = true;
      build.has_cudnn = true;
    }
    const LoadedConfig loaded = read_job_config(mpi.world(), train, args.ranks, build);
    if (!loaded.ok()) {
      report_config_errors(loaded, 0);
      return kExitUsage;
    }
    const Config& config = loaded.config;
    MemoryCapacity capacity;
    capacity.ranks_on_host = std::min(per_node, args.ranks);
    capacity.host_bytes = args.host_memory.empty() ? host_available_bytes()
                                                   : parse_memory_size(args.host_memory, "--host-memory");
    capacity.device_is_host = args.gpu_memory.empty();
    capacity.device_bytes = capacity.device_is_host ? capacity.host_bytes
                                                    : parse_memory_size(args.gpu_memory, "--gpu-memory");
    // With --gpu-memory, the plan of a GPU build (whatever this build is).
    const MemoryPlan plan = plan_memory(config, args.ranks, /*rl_loop=*/true, !capacity.device_is_host);
    const ModelShape shape = job_model_shape(config);
    std::cout << fmt::format("memory plan of {} on {} rank(s), {} per node: model {} ({:.4g} parameters{}), {}\n",
                             args.config_path, args.ranks, capacity.ranks_on_host, config.model.preset,
                             double(shape.parameter_count()),
                             shape.lora.on() ? fmt::format(", LoRA rank {}", shape.lora.rank) : "",
                             config.model.precision == Precision::bf16 ? "bf16" : "fp32");
    std::cout << "per rank, at least (the dominant terms of docs/memory.md; the job's memory ledger counts these and "
                 "a little more):\n";
    const bool train_larger = bytes_of(plan.train) >= bytes_of(plan.rollout);
    print_part("sharded state and buffers outside the arena", plan.persistent, "");
    print_part("train phase", plan.train, train_larger ? " (the larger phase: the arena's size)" : "");
    print_part("rollout phase", plan.rollout, train_larger ? "" : " (the larger phase: the arena's size)");
    print_part("host memory (the batches)", plan.host, "");
    const std::string where = capacity.device_is_host
                                  ? fmt::format("{:.3f} GiB of host memory shared by {} rank(s)",
                                                gib(capacity.host_bytes), capacity.ranks_on_host)
                                  : fmt::format("{:.3f} GiB per GPU (--gpu-memory)", gib(capacity.device_bytes));
    std::cout << fmt::format("device total per rank: {:.3f} GiB of {}\n", gib(plan.device_bytes()), where);
    const std::string problem = memory_plan_problem(plan, capacity);
    if (!problem.empty()) {
      std::cout << "does not fit: " << problem << "\n";
      return 1;
    }
    std::cout << "fits\n";
    return 0;
  } catch (const InputError& e) {
    print_error(e.what());
    return kExitUsage;
  }
}

}  // namespace shardrl
