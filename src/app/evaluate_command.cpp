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

int run_evaluate(const EvaluateArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  const ProcessLayout layout = ProcessLayout::discover(mpi.world());
  const int rank = layout.world_rank;
  init_logging(rank, false);
  spdlog::set_level(spdlog::level::warn);   // stdout carries the evaluation's line only

  if (args.config_path.empty() && args.checkpoint.empty()) {
    if (rank == 0) std::cerr << "shardrl: evaluate needs --config or --checkpoint (or both)\n";
    return kExitUsage;
  }
  // --dataset: the split evaluated. A training job reads it every rl.eval_interval iterations, so
  // the config accepts it only with an interval: one is set, which nothing here reads.
  std::vector<std::string> overrides = args.overrides;
  if (!args.dataset.empty()) {
    overrides.push_back("rl.eval_dataset=" + args.dataset);
    overrides.push_back("rl.eval_interval=1");
  }
  // Checked as a training job's config: the RL loop that evaluates is the one a job trains with.
  CheckpointRun run;
  try {
    run = open_checkpoint_run(mpi.world(), layout.world_size,
                              {"evaluate", args.config_path, args.checkpoint, overrides, args.base, true});
  } catch (const InputError& e) {
    if (rank == 0) print_error(e.what());
    return kExitUsage;
  }
  if (!run.loaded.ok()) {
    report_config_errors(run.loaded, rank);
    return kExitUsage;
  }
  Config cfg = run.loaded.config;
  if (cfg.rl.task != "text" || cfg.rl.eval_dataset.empty()) {
    if (rank == 0)
      print_error(cfg.rl.task != "text"
                      ? fmt::format("evaluate scores the text task's held-out split; this job's rl.task is \"{}\"",
                                    cfg.rl.task)
                      : "evaluate needs the split to score: rl.eval_dataset, or --dataset FILE");
    return kExitUsage;
  }
  // A path that cannot take the results stops the command now, not after the evaluation.
  if (!args.out.empty()) {
    std::string problem = rank == 0 ? output_file_problem(args.out, "--out") : std::string();
    broadcast_string(mpi.world(), problem, 0);
    if (!problem.empty()) {
      if (rank == 0) print_error(problem);
      return kExitUsage;
    }
  }
  // A LoRA run's random base is drawn again from its run's seed, which then seeds the
  // evaluation's draws too (a run's own evaluations drew with it).
  if (cfg.lora.rank > 0 && cfg.model.init_from.empty() && cfg.run.seed != run.base_seed) {
    if (rank == 0)
      std::cerr << "shardrl: note: run.seed = " << run.base_seed << ", the checkpoint's run's: its random LoRA base "
                << "is drawn from it, and so are the evaluation's samples\n";
    cfg.run.seed = run.base_seed;
  }
  DeviceBinding device;
  try {
    device = bind_device(layout);
  } catch (const InputError& e) {
    if (rank == 0) print_error(e.what());
    return kExitUsage;
  }
  KokkosRuntime kokkos(device.device_id);
  const DerivedConfig derived = derive(cfg, this_build());
  auto comm = make_communicator(
      derived.comm_backend == CommBackend::nccl ? CommBackendKind::nccl : CommBackendKind::mpi, mpi.world(),
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
  std::unique_ptr<Policy> built;
  try {
    built = std::make_unique<Policy>(cfg, *comm, PolicyUse{true, false, {}});
    const bool own = cfg.checkpoint.timeout_s > 0;
    watchdog.arm(own ? cfg.checkpoint.timeout_s : cfg.comm.timeout_s, "loading the weights", {},
                 own ? "checkpoint.timeout_s" : "comm.timeout_s");
    // A LoRA checkpoint's base is model.init_from's, loaded first.
    if (!cfg.model.init_from.empty() && (args.checkpoint.empty() || built->base_from_init_from()))
      built->load_init_from(mpi.world(), /*adapters=*/args.checkpoint.empty());
    if (!args.checkpoint.empty()) load_policy_weights(args.checkpoint, *built, mpi.world());
  } catch (const InputError& e) {   // the task's dataset, the memory plan, the weights: every rank's
    if (rank == 0) print_error(e.what());
    return kExitUsage;
  }
  GrpoLoop& loop = built->loop();
  // The loop asks its abandon check before every decode step and while scoring waits: here only
  // as a sign of progress (a signal ends the command, which keeps nothing).
  loop.abandon_rollouts_when([&watchdog] {
    watchdog.progress();
    return false;
  });
  watchdog.arm(cfg.comm.timeout_s, "evaluation");
  EvalStats e;
  try {
    e = loop.evaluate();
  } catch (const InputError& err) {   // a reward command's failure or bad reply, agreed by every rank
    watchdog.disarm();
    if (rank == 0) print_error(err.what());
    return kExitUsage;
  }
  watchdog.disarm();
  if (rank == 0) {
    std::cout << eval_line(e) << "\n";
    std::cout.flush();
  }
  if (!args.out.empty()) {
    std::string problem;
    if (rank == 0) {
      nlohmann::ordered_json out = {{"checkpoint", args.checkpoint.empty() ? nlohmann::ordered_json()
                                                                            : nlohmann::ordered_json(args.checkpoint)},
                                    {"eval_dataset", cfg.rl.eval_dataset},
                                    {"prompts", e.prompts},
                                    {"k", e.k}};
      for (const auto& [key, value] : eval_fields(e)) out[key] = value;
      try {
        write_text_atomically(args.out, out.dump(2) + "\n");
      } catch (const InputError& err) {
        problem = err.what();
      }
    }
    broadcast_string(mpi.world(), problem, 0);
    if (!problem.empty()) {
      if (rank == 0) print_error(problem);
      return kExitUsage;
    }
  }
  return kExitOk;
}

}  // namespace shardrl
