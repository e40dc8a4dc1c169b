#include "app/evaluate_command.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>

#include "app/checkpoint_run.hpp"
#include "app/job_config.hpp"
#include "app/output_file.hpp"
#include "app/progress.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "core/log.hpp"
#include "core/progress_meter.hpp"
#include "core/watchdog.hpp"
#include "io/text_file.hpp"
#include "job/job_checkpoint.hpp"
#include "job/policy.hpp"
#include "mpi/communicator.hpp"
#include "mpi/device.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"
#include "rl/grpo_loop.hpp"

namespace shardrl {
namespace {

// The command after its arguments: every refusal is an InputError, the same on every rank (the
// same config, or agreed: rank 0's file checks, the loop's scoring), which the caller names.
int evaluate(MPI_Comm world, const ProcessLayout& layout, const EvaluateArgs& args,
             const std::vector<std::string>& overrides) {
  const int rank = layout.world_rank;
  // Checked as a training job's config: the RL loop that evaluates is the one a job trains with.
  CheckpointRun run = open_checkpoint_run(world, layout.world_size,
                                          {"evaluate", args.config_path, args.checkpoint, overrides, args.base, true});
  if (!run.loaded.ok()) {
    report_config_errors(run.loaded, rank);
    return kExitUsage;
  }
  Config cfg = run.loaded.config;
  if (cfg.rl.task != "text")
    throw InputError(fmt::format("evaluate scores the text task's held-out split; this job's rl.task is \"{}\"",
                                 cfg.rl.task));
  if (cfg.rl.eval_dataset.empty())
    throw InputError("evaluate needs the split to score: rl.eval_dataset, or --dataset FILE");
  // A path that cannot take the results stops the command now, not after the evaluation.
  if (!args.out.empty())
    run_on_root(world, 0, [&] {
      if (std::string problem = output_file_problem(args.out, "--out"); !problem.empty()) throw InputError(problem);
    });
  // A LoRA run's random base is drawn again from its run's seed, which then seeds the
  // evaluation's draws too (a run's own evaluations drew with it).
  if (cfg.lora.rank > 0 && cfg.model.init_from.empty() && cfg.run.seed != run.base_seed) {
    if (rank == 0)
      std::cerr << "shardrl: note: run.seed = " << run.base_seed << ", the checkpoint's run's: its random LoRA base "
                << "is drawn from it, and so are the evaluation's samples\n";
    cfg.run.seed = run.base_seed;
  }
  const DeviceBinding device = bind_device(layout);
  KokkosRuntime kokkos(device.device_id);
  const DerivedConfig derived = derive(cfg, this_build());
  auto comm = make_communicator(
      derived.comm_backend == CommBackend::nccl ? CommBackendKind::nccl : CommBackendKind::mpi, world,
      cfg.comm.timeout_s);
  run.checkpoint.reset();   // the policy's reader opens the file again, collectively
  // A blocked rank ends the command, as it ends a job: the weights' load is bounded tensor by
  // tensor (checkpoint.timeout_s, else comm.timeout_s), the evaluation decode step by decode step
  // and scored batch by scored batch (comm.timeout_s).
  Watchdog watchdog;
  ProgressMeter::on_advance([&watchdog] { watchdog.progress(); });
  struct ProgressHookRemoval {
    ~ProgressHookRemoval() { ProgressMeter::on_advance({}); }
  } remove_progress_hook;
  // Sampled only: no gradients or optimizer state, training buffers for one sequence, and the
  // task's eval split checked (rl.dataset, the training split, is not read); the memory plan
  // checked for that.
  Policy policy(cfg, *comm, PolicyUse{true, false, {}, /*sampled_only=*/true});
  const bool own = cfg.checkpoint.timeout_s > 0;
  watchdog.arm(own ? cfg.checkpoint.timeout_s : cfg.comm.timeout_s, "loading the weights", {},
               own ? "checkpoint.timeout_s" : "comm.timeout_s");
  // A LoRA checkpoint's base is model.init_from's, loaded first.
  if (!cfg.model.init_from.empty() && (args.checkpoint.empty() || policy.base_from_init_from()))
    policy.load_init_from(world, /*adapters=*/args.checkpoint.empty());
  if (!args.checkpoint.empty()) load_policy_weights(args.checkpoint, policy, world);
  GrpoLoop& loop = policy.loop();
  // The loop asks its abandon check before every decode step and while scoring waits: here only
  // as a sign of progress (a signal ends the command, which keeps nothing).
  loop.abandon_rollouts_when([&watchdog] {
    watchdog.progress();
    return false;
  });
  watchdog.arm(cfg.comm.timeout_s, "evaluation");
  const EvalStats e = loop.evaluate();   // a reward command's failure is every rank's InputError
  watchdog.disarm();
  if (rank == 0) {
    std::cout << eval_line(e) << "\n";
    std::cout.flush();
  }
  if (!args.out.empty())
    run_on_root(world, 0, [&] {
      nlohmann::ordered_json out = {{"checkpoint", args.checkpoint.empty() ? nlohmann::ordered_json()
                                                                            : nlohmann::ordered_json(args.checkpoint)},
                                    {"eval_dataset", cfg.rl.eval_dataset},
                                    {"prompts", e.prompts},
                                    {"k", e.k}};
      for (const auto& [key, value] : eval_fields(e)) out[key] = value;
      write_text_atomically(args.out, out.dump(2) + "\n");
    });
  return kExitOk;
}

}  // namespace

int run_evaluate(const EvaluateArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  const ProcessLayout layout = ProcessLayout::discover(mpi.world());
  init_logging(layout.world_rank, false);
  spdlog::set_level(spdlog::level::warn);   // stdout carries the evaluation's line only

  if (args.config_path.empty() && args.checkpoint.empty()) {
    if (layout.world_rank == 0) std::cerr << "shardrl: evaluate needs --config or --checkpoint (or both)\n";
    return kExitUsage;
  }
  // --dataset: the split evaluated. A training job reads it every rl.eval_interval iterations, so
  // the config accepts it only with an interval: one is set, which nothing here reads.
  std::vector<std::string> overrides = args.overrides;
  if (!args.dataset.empty()) {
    overrides.push_back("rl.eval_dataset=" + args.dataset);
    overrides.push_back("rl.eval_interval=1");
  }
  try {
    return evaluate(mpi.world(), layout, args, overrides);
  } catch (const InputError& e) {
    if (layout.world_rank == 0) print_error(e.what());
    return kExitUsage;
  }
}

}  // namespace shardrl
