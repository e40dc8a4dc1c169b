// `shardrl train`, in the order of DESIGN.md's "What a job does": runtime, configuration, the
// policy (job/policy.hpp), resume, the supervised warm-up, then RL iterations (rollout, train,
// log, save) until run.iterations, and a checkpoint at the end.
#include "app/train_command.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>

#include "app/collective_smoke.hpp"
#include "app/job_config.hpp"
#include "app/output_file.hpp"
#include "app/progress.hpp"
#include "app/resume_choice.hpp"
#include "app/trace_file.hpp"
#include "config/changes.hpp"
#include "config/print.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "core/log.hpp"
#include "core/memory_ledger.hpp"
#include "core/phase_arena.hpp"
#include "core/progress_meter.hpp"
#include "core/stop_request.hpp"
#include "core/trace.hpp"
#include "core/version.hpp"
#include "core/watchdog.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/metrics_log.hpp"
#include "io/tensorboard_log.hpp"
#include "io/rank_heartbeats.hpp"
#include "io/run_lock.hpp"
#include "io/shared_directory.hpp"
#include "io/text_file.hpp"
#include "mpi/communicator.hpp"
#include "mpi/device.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/layout.hpp"
#include "mpi/memory_report.hpp"
#include "mpi/session.hpp"
#include "job/checkpoint_format.hpp"
#include "job/async_checkpoint_save.hpp"
#include "job/job_checkpoint.hpp"
#include "job/policy.hpp"
#include "rl/grpo_loop.hpp"

namespace shardrl {
namespace {

constexpr std::size_t kSmokeElementsPerRank = std::size_t(1) << 20;
// How long a rank that saw its reward command end waits for its own stop signal (below).
constexpr std::chrono::milliseconds kStopSignalGrace{1000};

// Before any work: one round of collectives whose results every rank checks.
void check_collectives(Communicator& comm, Precision precision) {
  SmokeRound round = run_collective_round(comm, precision, kSmokeElementsPerRank, 0);
  if (round.mismatches != 0)
    SHARDRL_FATAL(fmt::format("collective check failed: {} wrong elements", round.mismatches));
  spdlog::info("collectives checked ({} elements/rank, all_reduce busBw {:.2f} GB/s)", round.elements,
               round.all_reduce_bus_gbps);
}

// Rank 0 writes the resolved config into the run directory; every rank learns if that failed.
std::string write_run_files(MPI_Comm world, int rank, const Config& cfg, const DerivedConfig& derived) {
  std::string problem;
  if (rank == 0) {
    try {
      write_text_atomically(derived.run_dir / "config.toml", to_toml(cfg));
    } catch (const InputError& e) {
      problem = e.what();
    }
  }
  broadcast_string(world, problem, 0);
  return problem;
}

// debug.fail_rank: this rank fails the way debug.fail_mode says, to prove the job stops.
void inject_failure(const DebugConfig& debug, std::int64_t iteration) {
  if (debug.fail_mode == FailMode::error)
    SHARDRL_FATAL(fmt::format("injected failure (debug.fail_rank = {}) at iteration {}", debug.fail_rank,
                              iteration));
  if (debug.fail_mode == FailMode::exception)
    throw std::runtime_error(fmt::format("injected exception (debug.fail_rank = {}) at iteration {}",
                                         debug.fail_rank, iteration));
  spdlog::warn("injected hang (debug.fail_rank = {}): no longer taking part in collectives", debug.fail_rank);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void log_lines(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    spdlog::info("{}", text.substr(pos, nl - pos));
    pos = nl + 1;
  }
}

}  // namespace

int run_train(const TrainArgs& args) {
  // Runtime: MPI session -> process layout -> config -> one device per rank -> Kokkos -> comms.
  MpiSession mpi(nullptr, nullptr);
  // From here a SIGUSR1/SIGTERM only sets a flag: a Slurm warning that arrives while the model
  // is built or a checkpoint is loaded must not kill the rank (the default action for both).
  install_stop_handlers();
  ProcessLayout layout = ProcessLayout::discover(mpi.world());
  const int rank = layout.world_rank;
  init_logging(rank, args.log_all_ranks);
  if (const std::string problem = separate_worlds_problem(layout.world_size, launch_environment); !problem.empty()) {
    print_error(problem);
    return kExitUsage;
  }

  LoadedConfig loaded = read_job_config(mpi.world(), args, layout.world_size);
  if (!loaded.ok()) {
    report_config_errors(loaded, rank);
    return kExitUsage;
  }
  const Config& cfg = loaded.config;
  const DerivedConfig derived = derive(cfg, this_build());
  if (cfg.checkpoint.async) {   // the MPI library's thread level: the same on every rank
    if (const std::string why = AsyncCheckpointSave::unavailable(); !why.empty()) {
      if (rank == 0) print_error(loaded.origin.at("checkpoint.async") + ": " + why);
      return kExitUsage;
    }
  }

  DeviceBinding device;
  try {
    device = bind_device(layout);
  } catch (const InputError& e) {   // raised on every rank alike
    if (rank == 0) print_error(e.what());
    return kExitUsage;
  }
  KokkosRuntime kokkos(device.device_id);

  spdlog::info("shardrl {} | {} ranks on {} node(s) | Kokkos {} | comm {}", kVersion, layout.world_size,
               layout.node_count, execution_space_name(),
               derived.comm_backend == CommBackend::nccl ? "nccl" : "mpi");
  log_lines(format_config_table(loaded));
  // One job per run directory: rank 0 holds its lock until the job ends; a second job stops here,
  // every rank with the holder's name, before touching anything of the run.
  std::unique_ptr<RunLock> run_lock;
  {
    std::string problem;
    if (rank == 0) {
      try {
        run_lock = std::make_unique<RunLock>(derived.run_dir);
      } catch (const InputError& e) {
        problem = e.what();
      }
    }
    broadcast_string(mpi.world(), problem, 0);
    if (!problem.empty()) {
      if (rank == 0) print_error(problem);
      return kExitUsage;
    }
    if (run_lock && !run_lock->warning().empty()) spdlog::warn("{}", run_lock->warning());
    // Every rank writes the checkpoints there with the others: one that sees another directory
    // stops the job now, not in the first save after hours of training.
    try {
      require_shared_directory(derived.run_dir, mpi.world());
    } catch (const InputError& e) {
      if (rank == 0) print_error(e.what());
      return kExitUsage;
    }
  }
  if (!args.trace.empty()) {   // written at the end: a path that cannot take it stops the job now
    std::string problem = rank == 0 ? output_file_problem(args.trace, "--trace") : std::string();
    broadcast_string(mpi.world(), problem, 0);
    if (!problem.empty()) {
      if (rank == 0) print_error(problem);
      return kExitUsage;
    }
  }
  spdlog::info("run directory: {}", derived.run_dir.string());
  log_lines("devices:\n" + device_report(layout, device));

  auto comm = make_communicator(
      derived.comm_backend == CommBackend::nccl ? CommBackendKind::nccl : CommBackendKind::mpi,
      mpi.world(), cfg.comm.timeout_s);
  check_collectives(*comm, cfg.model.precision);

  // Policy: the model, sharded across the ranks, and the RL loop; fresh weights from the seed.
  // Transient buffers of both phases share one arena.
  std::unique_ptr<Policy> policy;
  try {
    policy = std::make_unique<Policy>(cfg, *comm, PolicyUse{true, args.profile, {}});
  } catch (const InputError& e) {   // the task's options or dataset: the same on every rank
    if (rank == 0) print_error(e.what());
    return kExitUsage;
  }
  Transformer& model = policy->model();
  ShardedTrainer& trainer = policy->trainer();
  GrpoLoop* rl = &policy->loop();
  PhaseArena& arena = policy->arena();
  spdlog::info("model {}: {} parameters in {} units, {} per rank; arena {:.2f} MiB (train {:.2f}, rollout {:.2f})",
               cfg.model.preset, model.options().shape.parameter_count(), model.unit_count(),
               trainer.layout().total_shard(), arena.bytes() / double(1 << 20),
               arena.phase_bytes(Phase::train) / double(1 << 20), arena.phase_bytes(Phase::rollout) / double(1 << 20));
  log_lines("build:\n" + policy->build_report());
  log_lines(memory_report(mpi.world()));
  // Every rank records the watched phases it enters, so that a phase that overruns names the ranks
  // it waits for; declared before the watchdog, which reads them until it stops.
  RankHeartbeats heartbeats(derived.run_dir, rank, layout.world_size);
  Watchdog watchdog;   // an iteration blocked anywhere (not only in a collective) ends the job
  // A long load (a checkpoint's, model.init_from's) is bounded tensor by tensor: each tensor read
  // is progress. Removed before the watchdog goes.
  ProgressMeter::on_advance([&watchdog] { watchdog.progress(); });
  struct ProgressHookRemoval {
    ~ProgressHookRemoval() { ProgressMeter::on_advance({}); }
  } remove_progress_hook;
  std::int64_t phase = 0;   // the same count on every rank: each enters the same phases in order
  auto watch = [&](const std::string& what) {
    heartbeats.enter(++phase, what);
    watchdog.arm(cfg.comm.timeout_s, what, [&heartbeats, seq = phase] { return heartbeats.behind(seq); });
  };
  // A checkpoint save or load, or the wait for a background save: the whole state to or from
  // storage (collective HDF5 calls, which a rank stalled on a file system would hang), on a
  // deadline of its own.
  auto watch_storage = [&](const std::string& what, const char* which) {
    heartbeats.enter(++phase, what);
    const bool own = cfg.checkpoint.timeout_s > 0;
    watchdog.arm(own ? cfg.checkpoint.timeout_s : cfg.comm.timeout_s, what,
                 [&heartbeats, seq = phase] { return heartbeats.behind(seq); },
                 own ? "checkpoint.timeout_s" : "comm.timeout_s",
                 fmt::format(", or the storage is too slow for the {} (raise checkpoint.timeout_s)", which));
  };
  auto watch_save = [&](const std::string& what) { watch_storage(what, "save"); };
  const std::filesystem::path checkpoints = derived.run_dir / "checkpoints";
  const std::string config_toml = to_toml(cfg);
  if (!args.trace.empty()) Trace::enable(/*fence=*/args.profile);
  // Progress bars of long silent phases: rank 0, on a terminal, outside Slurm jobs, so that a
  // batch log stays plain lines. (Under mpirun a rank's stdout is Open MPI's pseudo-terminal
  // whatever mpirun's own is, so the Slurm job is what tells a log apart.) SHARDRL_PROGRESS=0 or 1
  // decides instead.
  const char* progress = std::getenv("SHARDRL_PROGRESS");
  if (rank == 0 && (progress ? std::string(progress) == "1"
                             : isatty(STDOUT_FILENO) && std::getenv("SLURM_JOB_ID") == nullptr))
    ProgressMeter::enable();
  // --trace: the merged timeline, written where the job ends well (collective).
  const auto write_trace = [&] {
    if (!args.trace.empty()) write_trace_file(mpi.world(), layout.host, args.trace);
  };
  std::unique_ptr<AsyncCheckpointSave> background;   // checkpoint.async, made once the job has started
  try {
    // Resume: the run's latest checkpoint unless told otherwise (any world size).
    JobPosition position;
    bool resumed = false;
    watch_storage("loading the run's start (its checkpoint, model.init_from)", "load");
    const TrainArgs start_args = start_options(mpi.world(), rank, args, derived.run_dir);
    const std::filesystem::path from = resume_path(mpi.world(), rank, start_args, derived.run_dir);
    if (!from.empty()) check_config_changes(mpi.world(), from, cfg, args.allow_config_change, policy->task_checksum());
    // model.init_from starts a fresh run; a LoRA job's base comes from it on resume too, before
    // the checkpoint, which holds the adapters only.
    if (!cfg.model.init_from.empty() && (from.empty() || policy->base_from_init_from())) {
      policy->load_init_from(mpi.world(), /*adapters=*/from.empty());
      spdlog::info("{} from {}", policy->base_from_init_from() ? "frozen base" : "weights", cfg.model.init_from);
    }
    if (!from.empty()) {
      resumed = true;
      position = load_job_checkpoint(from, *policy, mpi.world());
      spdlog::info("resumed from {}: {} iterations and {} warm-up steps done", from.string(),
                   position.iterations_done, position.warmup_steps_done);
      if (!start_args.resume_from.empty())
        run_on_root(mpi.world(), 0, [&] {
          leave_no_other_course(checkpoints, from, position.iterations_done, start_args.overwrite, derived.run_dir);
        });
    }
    note_start_options(mpi.world(), start_args, derived.run_dir, position.iterations_done);   // for a requeue
    // The metrics log is opened (and a resumed run's checked) before anything is written or
    // trained: a log that does not parse stops the start with the run's files as they were.
    std::unique_ptr<MetricsLog> metrics;   // a resumed run continues the file; rank 0 writes it
    std::unique_ptr<TensorBoardLog> tensorboard;   // the same records, for TensorBoard; rank 0
    watch("opening the metrics log");   // its agreement must not wait unwatched
    // A resumed run drops the records from its resume point on, which it writes again; one that
    // has finished (below) writes none, and keeps them all, its final evaluation's included.
    const bool finished = resumed && position.iterations_done >= cfg.run.iterations &&
                          position.warmup_steps_done >= cfg.rl.sft_steps;
    // A finished run whose final evaluation a stop gave up (its record at the iteration count is
    // missing) runs that evaluation alone.
    bool final_eval_due = false;
    run_on_root(mpi.world(), 0, [&] {
      // A finished run keeps its final evaluation's record (at the iteration count, no
      // reward_mean), not a record of an iteration past its checkpoint (a killed job's, or one
      // whose run.iterations was lowered): the evaluation would have written a second one there.
      metrics = std::make_unique<MetricsLog>(derived.run_dir / "metrics.jsonl", position.iterations_done,
                                             finished ? "reward_mean" : "");
      const auto records = metrics->kept_records();
      final_eval_due = finished && cfg.rl.eval_interval > 0 && position.iterations_done == cfg.run.iterations &&
                       std::none_of(records.begin(), records.end(), [&](const auto& record) {
                         // The final evaluation's record: at the iteration count, with no
                         // iteration's fields.
                         return record.front().second == static_cast<double>(cfg.run.iterations) &&
                                std::none_of(record.begin(), record.end(),
                                             [](const auto& field) { return field.first == "reward_mean"; });
                       });
      // A resumed run's event file starts again from metrics.jsonl's kept records (without the
      // iterations this job redoes), so no step appears twice.
      tensorboard = std::make_unique<TensorBoardLog>(derived.run_dir / "tensorboard", config_toml, records);
    });
    final_eval_due = any_rank(mpi.world(), final_eval_due);   // rank 0's answer, to every rank
    watchdog.disarm();
    // The job has started cleanly: only now is the run's config.toml (re)written, so a start that
    // fails (a bad checkpoint, a busy run, a bad metrics log) leaves the run's files as they were.
    if (std::string problem = write_run_files(mpi.world(), rank, cfg, derived); !problem.empty())
      throw InputError("run directory: " + problem);
    // checkpoint.async: the periodic saves are written by a background thread (the final one and
    // a signal's wait for it, then save as always).
    if (cfg.checkpoint.async) background = std::make_unique<AsyncCheckpointSave>(*policy, mpi.world());
    const auto report_background = [&](const std::optional<AsyncCheckpointSave::Finished>& done) {
      if (done)
        spdlog::info("checkpoint {} (interval) written in the background in {:.2f}s",
                     checkpoint_path(checkpoints, done->iteration).string(), done->seconds);
    };
    // The position the run's newest checkpoint holds (the one it resumed from by itself, or the
    // last save this job began): a stop there has nothing new to save, and Slurm's KillWait no
    // time to spare. Not after --resume-from: that file may be another run's, or this run's
    // `latest` may name none after --overwrite.
    const auto at = [&] { return std::pair{position.iterations_done, position.warmup_steps_done}; };
    std::optional<std::pair<std::int64_t, std::int64_t>> saved_at;
    if (resumed && start_args.resume_from.empty()) saved_at = at();
    // Waits for a background save (its own deadline). Its failure is the same on every rank and
    // the state is still here: the caller saves the newer state now instead of exiting 2 with
    // what the job did since its last committed checkpoint lost (a disk full for a moment, or a
    // stop's save that never ran). False when it failed.
    static constexpr const char* kAfterFailedBackground = "in the foreground after the background save failed";
    const auto background_succeeded = [&](const auto& wait_or_poll) {
      try {
        report_background(wait_or_poll());
        return true;
      } catch (const InputError& e) {
        spdlog::warn("the background checkpoint save failed ({}): the state is saved again now", e.what());
        return false;
      }
    };
    auto finish_background = [&] {
      watch_save("waiting for the background checkpoint save");
      return background_succeeded([&] { return background->wait(); });
    };
    auto save = [&](const char* why) {
      const TraceSpan span("checkpoint save");
      const auto t0 = std::chrono::steady_clock::now();
      if (background) finish_background();   // then this save's own deadline
      watch_save("checkpoint save");
      save_job_checkpoint(checkpoints, position, *policy, config_toml, mpi.world());
      saved_at = at();
      watchdog.disarm();
      spdlog::info("checkpoint {} ({}) in {:.2f}s", checkpoint_path(checkpoints, position.iterations_done).string(),
                   why, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    auto save_periodic = [&] {
      if (!background) return save("interval");
      const TraceSpan span("checkpoint snapshot");
      const auto t0 = std::chrono::steady_clock::now();
      // A failed one is followed by a save in the foreground, whose own failure stops the job:
      // a disk that stays full must not leave a job training on without checkpoints.
      if (!finish_background()) return save(kAfterFailedBackground);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      watch_save("checkpoint save");   // the copy to the host
      const double copied = background->start(checkpoints, position, config_toml);
      saved_at = at();
      watchdog.disarm();
      spdlog::info("checkpoint {} (interval) being written in the background; training paused {:.2f}s ({:.2f}s "
                   "waiting for the previous save)",
                   checkpoint_path(checkpoints, position.iterations_done).string(), waited + copied, waited);
    };
    // Ranks agree on a stop request (SIGUSR1/SIGTERM) between steps, inside the step's deadline
    // (an agreement is a collective: it must never wait unwatched); then save and exit.
    auto stop_agreed = [&](bool more_to_do) {
      const bool stop = more_to_do && any_rank(mpi.world(), stop_requested());
      watchdog.disarm();
      return stop;
    };
    auto stop_after_save = [&] {
      bool written = saved_at == at();
      if (written && background) {   // that checkpoint may still be being written
        written = finish_background();
        watchdog.disarm();
      }
      if (written)
        spdlog::info("checkpoint {} already holds this state (stop requested by a signal)",
                     checkpoint_path(checkpoints, position.iterations_done).string());
      else
        save("stop requested by a signal");
      try {   // the checkpoint is committed: a trace that fails must not keep Slurm from requeueing
        write_trace();
      } catch (const InputError& e) {
        spdlog::warn("the trace was not written: {}", e.what());
      }
      spdlog::warn("stopped by a signal after a checkpoint: run the same command again to continue");
      return kExitStoppedBySignal;
    };

    // Supervised warm-up on the task's demonstrations, then the reference policy is frozen.
    const bool warmed_up = position.warmup_steps_done < cfg.rl.sft_steps;
    if (warmed_up) {
      rl->check_demonstrations();
      if (cfg.rl.sft_lr > 0) trainer.set_peak_lr(static_cast<float>(cfg.rl.sft_lr));
      for (std::int64_t step = position.warmup_steps_done; step < cfg.rl.sft_steps; ++step) {
        watch(fmt::format("warm-up step {}", step + 1));
        const TrainStats s = rl->warmup_step(step);
        position.warmup_steps_done = step + 1;
        if (step == 0 || (step + 1) % 10 == 0 || step + 1 == cfg.rl.sft_steps)
          spdlog::info("{}", warmup_line(step, cfg.rl.sft_steps, s));
        if (stop_agreed(step + 1 < cfg.rl.sft_steps)) return stop_after_save();
      }
      if (cfg.rl.kl_coef > 0) trainer.snapshot_reference();
      // RL's schedule (warm-up, decay) from its first step: the warm-up's steps spent none of it.
      trainer.start_schedule(static_cast<float>(cfg.optim.lr));
    } else if (position.iterations_done == 0) {
      // No RL step yet: the warm-up is over here (none was asked, or a run stopped within it is
      // resumed with rl.sft_steps lowered to the steps it had done) and its end is this job's,
      // as above: the reference is the weights now, RL's schedule starts now. For a checkpoint
      // saved after that end both give what it holds (no step has changed the weights since);
      // a lowered rl.sft_steps left the reference all zeros and the schedule unstarted.
      if (cfg.rl.kl_coef > 0) trainer.snapshot_reference();
      trainer.start_schedule(static_cast<float>(cfg.optim.lr));
    } else {
      trainer.set_peak_lr(static_cast<float>(cfg.optim.lr));   // the schedule's start as resumed
    }

    const auto record_metrics = [&](MetricsRecord record) {
      record.emplace_back(TensorBoardLog::kWallTime,
                          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
      metrics->write(record);
      tensorboard->write(record);
    };
    watchdog.disarm();
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t first = position.iterations_done;
    // rl.eval_interval: the eval split before every interval-th iteration (iteration 0 included,
    // after the warm-up) and once more after the last.
    auto evaluate = [&](std::int64_t before_iteration) {
      watch(fmt::format("evaluation before iteration {}", before_iteration + 1));
      const EvalStats e = rl->evaluate();
      spdlog::info("{}", eval_line(e));
      return e;
    };
    // Until an iteration's train phase, nothing the job keeps has changed in it (its draws are
    // functions of the seed and the iteration): a stop there can save the state the iteration
    // began with. SIGTERM (scancel, preemption, the hard time limit) leaves Slurm's KillWait,
    // often 30 s, before SIGKILL, less than a rollout may take, so it gives up the rollout or
    // evaluation in progress; SIGUSR1's warning comes early enough to finish the iteration.
    const auto terminated = [] { return stop_signal() == SIGTERM; };
    // Asked before every decode step and while scoring waits: each is also a sign of progress, so
    // comm.timeout_s bounds the iteration's steps, not the iteration whole (a real rollout may
    // take far longer, and a reward command is bounded by rl.reward_timeout_s per batch).
    rl->abandon_rollouts_when([&watchdog, terminated] {
      watchdog.progress();
      return terminated();
    });
    rl->progress_with([&watchdog] { watchdog.progress(); });
    // The same SIGTERM also ends a reward command (Slurm signals every process of the step), and
    // the scoring then fails on every rank: where one came, the job saves and exits 3 instead of
    // failing. The rank's own signal may land a moment after its command's end was seen: it is
    // given kStopSignalGrace to arrive. (SIGUSR1 never ends the command, which blocks it: an
    // error under a SIGUSR1 warning is the command's own, and stays an error.)
    const auto stop_instead_of = [&](const InputError& e) {
      const auto until = std::chrono::steady_clock::now() + kStopSignalGrace;
      while (!terminated() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const bool stop = any_rank(mpi.world(), terminated());
      if (stop) spdlog::warn("stopped with a stop requested by a signal: {}", e.what());
      return stop;
    };
    // Runs an evaluation or a rollout; true where a stop gave it up (RolloutAbandoned, or a
    // reward command's failure under SIGTERM), after logging what then happens (`then`).
    const auto stopped_during = [&](const char* then, auto&& work) {
      try {
        work();
        return false;
      } catch (const RolloutAbandoned& e) {
        spdlog::warn("{}: {}", e.what(), then);
        return true;
      } catch (const InputError& e) {
        if (stop_instead_of(e)) return true;
        throw;
      }
    };
    RolloutBatch last;
    for (std::int64_t it = first; it < cfg.run.iterations; ++it) {
      if (cfg.debug.fail_rank == rank) inject_failure(cfg.debug, it);
      const TraceSpan span("iteration", it);
      IterationReport r;
      if (stopped_during("the iteration starts again when the job continues", [&] {
            if (cfg.rl.eval_interval > 0 && it % cfg.rl.eval_interval == 0) r.eval = evaluate(it);
            watch(fmt::format("iteration {}", it + 1));
            trainer.reset_profile();
            r.iteration = it;
            r.total = cfg.run.iterations;
            r.rollout = rl->rollout(it);
          }))
        return stop_after_save();
      // A SIGTERM after the rollout's last generate call (while it scored): the train phase,
      // which cannot be given up, could outlast KillWait, and the state is still the iteration's
      // start.
      if (any_rank(mpi.world(), terminated())) {
        spdlog::warn("a stop was requested before the train phase: the iteration starts again when the job continues");
        return stop_after_save();
      }
      r.train = rl->train(r.rollout);
      position.iterations_done = it + 1;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.eta_s = elapsed / double(it + 1 - first) * double(cfg.run.iterations - it - 1);
      r.mem_peak_bytes = MemoryLedger::instance().peak();
      spdlog::info("{}", progress_line(r));
      if (std::string p = profile_line(trainer.profile()); !p.empty()) spdlog::info("{}", p);
      // Rank 0 writes the record; a failure there (a full disk) stops every rank with its cause.
      run_on_root(mpi.world(), 0, [&] {
        if (cfg.debug.fail_io == FailIo::metrics && position.iterations_done == cfg.debug.fail_io_iteration)
          throw InputError(fmt::format("cannot write '{}': No space left on device (injected: debug.fail_io = "
                                       "\"metrics\")",
                                       (derived.run_dir / "metrics.jsonl").string()));
        record_metrics(metrics_record(r));
      });
      last = std::move(r.rollout);
      // A collective, inside the watch; a failure is every rank's alike. The save disarms, and
      // the stop's agreement below is watched again.
      if (background && !background_succeeded([&] { return background->poll(); })) {
        save(kAfterFailedBackground);
        watch(fmt::format("iteration {}, after its save", it + 1));
      }
      const bool periodic = cfg.checkpoint.interval > 0 && position.iterations_done % cfg.checkpoint.interval == 0;
      if (stop_agreed(it + 1 < cfg.run.iterations)) return stop_after_save();
      if (it + 1 < cfg.run.iterations && periodic && saved_at != at()) save_periodic();
    }
    // A finished run resumed has nothing to add; a fresh job of no iterations saves its initial
    // weights (the way to turn model.init_from's directory into a checkpoint).
    if (first >= cfg.run.iterations && !warmed_up && resumed && !final_eval_due) {
      spdlog::info("nothing to do: the run has finished its {} iterations (raise run.iterations to continue, or "
                   "start afresh with --no-resume --overwrite)",
                   cfg.run.iterations);
      write_trace();
      return kExitOk;
    }
    // The trained state first: the final evaluation changes nothing a checkpoint holds, and one
    // that fails (a reward command's error, a hang) must not cost the iterations since the last
    // save. (With final_eval_due, the checkpoint it resumed from holds the final state.)
    // (Not again where the last iteration's own save, after a failed background one, holds it.)
    if (!final_eval_due && saved_at != at()) save("end of the job");
    if (cfg.rl.eval_interval > 0 && (first < cfg.run.iterations || final_eval_due)) {
      // The final evaluation, a record of its own at the iteration count (a later resume that
      // goes on drops it with every record from there). Stopped by a signal, the job exits with
      // its trained state saved, and the next job runs the evaluation alone.
      EvalStats e;
      if (stopped_during("the trained state is saved without the final evaluation",
                         [&] { e = evaluate(cfg.run.iterations); }))
        return stop_after_save();
      std::vector<std::pair<std::string, double>> record{{"iteration", static_cast<double>(cfg.run.iterations)}};
      for (auto& f : eval_fields(e)) record.push_back(std::move(f));
      run_on_root(mpi.world(), 0, [&] { record_metrics(record); });
      watchdog.disarm();
    }
    if (final_eval_due) {   // the checkpoint it resumed from holds the final state
      spdlog::info("the final evaluation, missing from the metrics (a stop gave it up, or rl.eval_interval was "
                   "off), is written: the run has finished its {} iterations",
                   cfg.run.iterations);
      write_trace();
      return kExitOk;
    }
    write_trace();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("done: {} iterations ({} in this job) in {:.1f}s, final reward {:.3f} (pass rate {:.3f}); {} optimizer "
                 "steps, {} skipped; metrics in {}",
                 cfg.run.iterations, cfg.run.iterations - first, elapsed, last.reward_mean, last.pass_rate,
                 trainer.metrics().step, trainer.metrics().skipped, (derived.run_dir / "metrics.jsonl").string());
  } catch (const InputError& e) {   // data and checkpoints are checked alike on every rank
    if (rank == 0) print_error(e.what());
    if (background) {   // a save in flight finishes (every rank's writer takes part) before the exit
      watch_save("waiting for the background checkpoint save");
      background.reset();
    }
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace shardrl
