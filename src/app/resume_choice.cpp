// Which checkpoint a train job resumes from, and whether it may (interface and why: resume_choice.hpp).
#include "app/resume_choice.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "config/changes.hpp"
#include "config/model_presets.hpp"
#include "app/job_config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/metrics_log.hpp"
#include "io/text_file.hpp"
#include "job/checkpoint_format.hpp"
#include "job/job_checkpoint.hpp"
#include "mpi/host_exchange.hpp"

namespace shardrl {

void leave_no_other_course(const std::filesystem::path& checkpoints, const std::filesystem::path& from,
                           std::int64_t resumed_at, bool overwrite, const std::filesystem::path& run_dir) {
  std::error_code ec;
  // Where the file is (a bare name, or a link into the run's checkpoints, resolved).
  const std::filesystem::path from_dir = std::filesystem::weakly_canonical(std::filesystem::absolute(from), ec).parent_path();
  if (!std::filesystem::equivalent(from_dir, checkpoints, ec)) {
    // Another run's checkpoint (or a copy elsewhere): whatever this run holds is another course.
    const std::vector<std::filesystem::path> held = committed_checkpoints(checkpoints);
    const std::filesystem::path metrics_file = run_dir / "metrics.jsonl";
    std::size_t before = 0;
    if (std::filesystem::exists(metrics_file, ec))
      for (const auto& record : read_metrics(metrics_file))
        if (record.front().second < static_cast<double>(resumed_at)) ++before;
    if (!held.empty() || before > 0) {
      const std::string what =
          fmt::format("{}{}{}", held.empty() ? "" : fmt::format("{} checkpoint(s), the newest {}", held.size(),
                                                                held.back().filename().string()),
                      !held.empty() && before > 0 ? ", and " : "",
                      before == 0 ? "" : fmt::format("{} metrics record(s) before iteration {}", before, resumed_at));
      if (!overwrite)
        throw InputError(fmt::format(
            "--resume-from {} (iteration {}) is not one of this run's checkpoints, and the run directory {} already "
            "holds another course's history ({}), which the resumed run would continue as its own; choose another "
            "run.name to branch from it, or add --overwrite to delete them",
            from.string(), resumed_at, run_dir.string(), what));
      const std::size_t deleted = delete_checkpoints_after(checkpoints, -1);
      std::filesystem::remove(metrics_file);
      spdlog::warn("--overwrite: deleted {} checkpoint(s) and the metrics of {} (another course's history)", deleted,
                   run_dir.string());
      return;
    }
  }
  // The run's own checkpoint at the iteration resumed at counts too where `from` is another file
  // (another run's): a save before the first iteration ends (a stop) would replace it.
  std::int64_t after = resumed_at;
  const std::filesystem::path own = checkpoint_path(checkpoints, resumed_at);
  if (std::filesystem::is_regular_file(own, ec) && !std::filesystem::equivalent(own, from, ec)) after = resumed_at - 1;
  const std::vector<std::filesystem::path> later = committed_checkpoints_after(checkpoints, after);
  if (later.empty()) return;
  const char* which = after == resumed_at ? "later" : "same or later";
  if (!overwrite)
    throw InputError(fmt::format(
        "--resume-from {} (iteration {}): the run directory {} already holds {} {} checkpoint(s), the newest "
        "{}, which the resumed run would replace (and drop their metrics); choose another run.name to branch from "
        "it, or add --overwrite to delete them",
        from.string(), resumed_at, run_dir.string(), later.size(), which, later.back().filename().string()));
  const std::size_t deleted = delete_checkpoints_after(checkpoints, after);
  spdlog::warn("--overwrite: deleted {} {} checkpoint(s) of {} (the newest {}) and their metrics", deleted, which,
               run_dir.string(), later.back().filename().string());
}

namespace {
// Where a job that applied start options (--resume-from, --no-resume) notes it: the Slurm job's
// id (empty outside Slurm) and the iteration it started at, written by rank 0 once the options
// took effect.
std::filesystem::path start_note(const std::filesystem::path& run_dir) { return run_dir / ".start_applied"; }
std::string this_job() {
  const char* id = std::getenv("SLURM_JOB_ID");
  return id ? id : "";
}

// LoRA changes no resume can make, even allowed: the checkpoint holds no state for them (a LoRA
// run's base is frozen bf16, without fp32 weights or moments; a full run's has no adapters), so
// its tensors would be missing, or of another shape, with a message naming a tensor, not the cause.
void refuse_lora_change_a_resume_cannot_make(const LoraShape& was, const LoraShape& now,
                                             const std::filesystem::path& checkpoint) {
  const std::string name = checkpoint.string();
  const std::string new_run =
      fmt::format("start a new run from its policy instead: `shardrl convert --from {} --to-safetensors DIR{}`, then "
                  "`--set model.init_from=DIR` with another run.name",
                  name, was.on() ? " --merged" : "");
  if (was.on() && !now.on())
    throw InputError(fmt::format("{} is a LoRA run's (lora.rank = {}): it holds its base frozen in bf16, without the "
                                 "fp32 weights and optimizer state that training every weight needs, so a resume "
                                 "cannot turn LoRA off; {}",
                                 name, was.rank, new_run));
  if (!was.on() && now.on())
    throw InputError(fmt::format("{} is a full run's (lora.rank = 0): it holds no adapters for lora.rank = {}, and a "
                                 "resume cannot start LoRA; {}",
                                 name, now.rank, new_run));
  if (!was.on()) return;
  if (was.rank != now.rank)
    throw InputError(fmt::format("{} holds adapters of lora.rank = {}, and a resume cannot change their rank to {}; "
                                 "resume with lora.rank = {}, or {}",
                                 name, was.rank, now.rank, was.rank, new_run));
  std::vector<std::string> added;
  for (int t = 0; t < kLoraTargets; ++t)
    if (now.adapts(static_cast<LoraTarget>(t)) && !was.adapts(static_cast<LoraTarget>(t)))
      added.push_back(fmt::format("\"{}\"", kLoraTargetNames[t]));
  if (now.experts && !was.experts) added.push_back("\"experts\"");
  if (!added.empty())
    throw InputError(fmt::format("{} holds no adapters on lora.targets {}, and a resume cannot start new ones; resume "
                                 "without them, or {}",
                                 name, fmt::join(added, ", "), new_run));
}
}  // namespace

TrainArgs start_options(MPI_Comm world, int rank, const TrainArgs& args, const std::filesystem::path& run_dir) {
  const bool start_options_given = !args.resume_from.empty() || args.no_resume || args.overwrite;
  if (!args.requeued || !start_options_given) return args;   // the same on every rank
  // The first run has taken its start options and saved since: this job's note is there and a
  // committed checkpoint is as new. A note alone (the first run stopped before its first save),
  // or checkpoints alone (older ones, the first run stopped before its options took effect: a
  // --no-resume --overwrite would continue the course it was to delete), and the options apply.
  std::string problem, continues;   // continues: "1" or "0"
  if (rank == 0) {
    try {
      continues = "0";
      std::error_code ec;
      const std::filesystem::path note = start_note(run_dir);
      if (std::filesystem::is_regular_file(note, ec)) {
        std::ifstream in(note);
        std::string job, at;
        std::getline(in, job);
        std::getline(in, at);
        // A checkpoint past the iteration the job started at is this job's (the options deleted
        // or refused any later one); one at that iteration, where written after the note (the
        // warm-up's saves keep the iteration count).
        const std::filesystem::path checkpoints = run_dir / "checkpoints";
        const std::int64_t started_at = at.empty() ? 0 : std::stoll(at);
        const std::filesystem::path same = checkpoint_path(checkpoints, started_at);
        if (job == this_job() &&
            (!committed_checkpoints_after(checkpoints, started_at).empty() ||
             (std::filesystem::is_regular_file(same, ec) &&
              std::filesystem::last_write_time(same) >= std::filesystem::last_write_time(note))))
          continues = "1";
      }
    } catch (const InputError& e) {
      problem = e.what();
    } catch (const std::filesystem::filesystem_error& e) {
      problem = e.what();
    } catch (const std::exception&) {   // a note that is not ours (stoll): the options apply
      continues = "0";
    }
  }
  broadcast_string(world, problem, 0);
  broadcast_string(world, continues, 0);
  if (!problem.empty()) throw InputError(problem);
  if (continues != "1") {
    spdlog::info("--requeued: {} holds no checkpoint this job saved after taking its start options; they apply "
                 "as at the job's first run",
                 run_dir.string());
    return args;
  }
  TrainArgs continued = args;
  continued.resume_from.clear();
  continued.no_resume = continued.overwrite = false;
  spdlog::info("--requeued: continuing {} from its latest checkpoint; the first run's start options "
               "(--resume-from, --no-resume, --overwrite) are not applied again",
               run_dir.string());
  return continued;
}

void note_start_options(MPI_Comm world, const TrainArgs& start, const std::filesystem::path& run_dir,
                        std::int64_t iterations_done) {
  if (start.resume_from.empty() && !start.no_resume) return;
  run_on_root(world, 0, [&] {
    write_text_atomically(start_note(run_dir), this_job() + "\n" + std::to_string(iterations_done) + "\n");
  });
}

std::filesystem::path resume_path(MPI_Comm world, int rank, const TrainArgs& args,
                                  const std::filesystem::path& run_dir) {
  if (!args.resume_from.empty()) return args.resume_from;
  const std::filesystem::path checkpoints = run_dir / "checkpoints";
  std::string found, problem, note;
  if (rank == 0) {
    try {
      const std::vector<std::filesystem::path> committed = committed_checkpoints(checkpoints);
      if (args.no_resume) {
        if (!committed.empty() && !args.overwrite)
          problem = fmt::format("--no-resume: the run directory {} already holds {} checkpoint(s), the newest {}; "
                                "run without --no-resume to continue it, choose another run.name, or add "
                                "--overwrite to delete them and start afresh",
                                run_dir.string(), committed.size(), committed.back().filename().string());
        else if (args.overwrite) {
          std::filesystem::remove_all(checkpoints);
          std::filesystem::remove(run_dir / "metrics.jsonl");
          if (!committed.empty()) note = fmt::format("--overwrite: deleted {} checkpoint(s) and the metrics of {}",
                                                     committed.size(), run_dir.string());
        }
      } else {
        found = latest_checkpoint(checkpoints).string();
        // `latest` decides (a run resumed from an older checkpoint leaves newer files of the
        // abandoned course), but a newer committed file may also be a crash between its commit
        // and the pointer: say so.
        if (!found.empty() && !committed.empty() &&   // committed: oldest first, `latest` among them
            committed.back().filename() != std::filesystem::path(found).filename())
          note = fmt::format("resuming from {}, which `latest` names, though the newer {} exists (a crash between its "
                             "commit and `latest`, or a run resumed from an older checkpoint); --resume-from {} takes it",
                             std::filesystem::path(found).filename().string(), committed.back().filename().string(),
                             committed.back().string());
        if (found.empty() && !committed.empty()) {
          found = committed.back().string();
          note = fmt::format("{} has no `latest` (a crash between a commit and its pointer?): resuming from the "
                             "newest committed checkpoint {}",
                             checkpoints.string(), committed.back().filename().string());
        }
      }
    } catch (const InputError& e) {
      problem = e.what();
    } catch (const std::filesystem::filesystem_error& e) {
      problem = e.what();
    }
  }
  broadcast_string(world, problem, 0);
  broadcast_string(world, found, 0);
  if (!problem.empty()) throw InputError(problem);
  if (!note.empty()) spdlog::warn("{}", note);
  return found;
}

void check_config_changes(MPI_Comm world, const std::filesystem::path& checkpoint, const Config& cfg, bool allowed,
                          std::int64_t task_checksum) {
  namespace f = checkpoint_format;
  std::string saved_text, saved_task, saved_model;
  std::int64_t saved_seed = 0, saved_checksum = -1;
  {
    const std::unique_ptr<ShardedFileReader> in = open_checkpoint(checkpoint, world);
    saved_text = in->read_string(f::kConfig);
    saved_seed = in->read_int64(f::kSeed);
    saved_task = in->read_string(f::kTask);
    saved_model = in->read_string(f::kModelSummary);
    if (in->has(f::kTaskChecksum)) saved_checksum = in->read_int64(f::kTaskChecksum);
  }
  const LoadedConfig saved = parse_saved_config(saved_text, checkpoint.string() + ":" + f::kConfig);
  std::vector<std::string> breaking;
  if (!saved.ok()) {
    // Written by a shardrl with another schema: its keys cannot be compared one by one, but what
    // every checkpoint records beside them can (a run resumed with another seed, task or model
    // went on silently before).
    spdlog::warn("the configuration saved in {} does not load in this shardrl ({}); its keys are not compared, "
                 "only the seed, the task and the model it records",
                 checkpoint.string(), saved.errors.front());
    const std::string model = model_summary(cfg);
    if (saved_seed != cfg.run.seed) breaking.push_back(fmt::format("run.seed = {} -> {}", saved_seed, cfg.run.seed));
    if (saved_task != cfg.rl.task) breaking.push_back(fmt::format("rl.task = {} -> {}", saved_task, cfg.rl.task));
    if (saved_model != model) breaking.push_back(fmt::format("the model = {} -> {}", saved_model, model));
  }
  // The task's files (the dataset, the tokenizer's and the template's), wherever they are now.
  const bool same_examples = saved_checksum >= 0 && saved_checksum == task_checksum;
  if (saved_checksum >= 0 && task_checksum >= 0 && !same_examples)
    breaking.push_back(fmt::format("the task's files (rl.dataset, and the text task's tokenizer and chat template) = "
                                   "checksum {:08x} -> {:08x}",
                                   saved_checksum, task_checksum));
  for (const ConfigChange& c : saved.ok() ? config_changes(saved.config, cfg) : std::vector<ConfigChange>{}) {
    // A key neither job reads (a run saved before such a key was refused at load, resumed
    // without it) changes nothing; a file's place, nothing where what the task reads from it is
    // the same (a requeued job's copy in node scratch).
    const bool moved = same_examples && (c.key == "rl.dataset" || c.key == "model.tokenizer");
    const bool breaks = !c.keeps_trajectory && !c.read_by_neither && !moved;
    spdlog::info("config change since {}: {} = {} -> {}{}", checkpoint.filename().string(), c.key, c.before, c.after,
                 c.read_by_neither ? " (read by neither job)"
                 : moved          ? " (the same files: the task's checksum is the checkpoint's)"
                 : breaks         ? " (changes the run's trajectory)"
                                  : "");
    if (breaks) breaking.push_back(fmt::format("{} = {} -> {}", c.key, c.before, c.after));
  }
  if (allowed && saved.ok()) {
    const LoraShape was = job_model_shape(saved.config).lora, now = job_model_shape(cfg).lora;
    refuse_lora_change_a_resume_cannot_make(was, now, checkpoint);
    // The KL term's reference is the policy as RL began (after the warm-up); a run without it
    // kept none, and past its first iteration those weights are gone (a LoRA run's reference is
    // its frozen base, always there).
    if (saved.config.rl.kl_coef == 0 && cfg.rl.kl_coef > 0 && !now.on())
      throw InputError(fmt::format(
          "{} is a run's without the KL term (rl.kl_coef = 0): it holds no reference policy (the weights as RL "
          "began) to measure rl.kl_coef = {:g} against, so a resume cannot turn it on; resume with rl.kl_coef = 0, "
          "or start a new run from its policy (`shardrl convert --from {} --to-safetensors DIR`, then "
          "`--set model.init_from=DIR` with another run.name), whose reference that policy is",
          checkpoint.string(), cfg.rl.kl_coef, checkpoint.string()));
    // Adapters the checkpoint holds on targets the job no longer names are not loaded: trained
    // weights the run drops, which the change's line alone did not say.
    std::vector<std::string> dropped;
    for (int t = 0; t < kLoraTargets; ++t)
      if (was.adapts(static_cast<LoraTarget>(t)) && !now.adapts(static_cast<LoraTarget>(t)))
        dropped.push_back(fmt::format("\"{}\"", kLoraTargetNames[t]));
    if (was.on() && was.experts && !(now.on() && now.experts)) dropped.push_back("\"experts\"");
    if (!dropped.empty())
      spdlog::warn("{} holds adapters on lora.targets {} that this job does not name: they are not loaded, and the "
                   "run goes on without what they learned",
                   checkpoint.filename().string(), fmt::join(dropped, ", "));
  }
  if (breaking.empty() || allowed) return;
  std::string list;
  for (const std::string& b : breaking) list += "\n  " + b;
  throw InputError(fmt::format("resuming {} with a configuration that changes the run's trajectory:{}\nresume with "
                               "the checkpoint's values, start another run (another run.name), or pass "
                               "--allow-config-change",
                               checkpoint.string(), list));
}

}  // namespace shardrl
