#include "app/checkpoint_run.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "app/cli.hpp"
#include "app/job_config.hpp"
#include "config/model_presets.hpp"
#include "core/error.hpp"
#include "job/checkpoint_format.hpp"
#include "mpi/host_exchange.hpp"
#include "model/model_shape.hpp"

namespace shardrl {

CheckpointRun open_checkpoint_run(MPI_Comm world, int world_size, const CheckpointRunArgs& args) {
  SHARDRL_CHECK(!args.config_path.empty() || !args.checkpoint.empty(), "a config or a checkpoint to read it from");
  CheckpointRun run;
  if (!args.checkpoint.empty()) run.checkpoint = open_checkpoint(args.checkpoint, world);
  // --base is model.init_from, given last: the shape of a "custom" model is read from its
  // config.json as the config is loaded, where the run's path may name nothing now.
  const std::vector<std::string> moved_base =
      args.base.empty() ? std::vector<std::string>{} : std::vector<std::string>{"model.init_from=" + args.base};
  std::vector<std::string> overrides = args.overrides;
  overrides.insert(overrides.end(), moved_base.begin(), moved_base.end());
  // A checkpoint's config, which its run took: this build's rules, not the refusal of settings
  // without effect added since (an older run's would be refused).
  BuildInfo saved_build = this_build();
  saved_build.saved_run = true;
  const std::string saved_where = args.checkpoint + ":" + checkpoint_format::kConfig;
  if (!args.config_path.empty()) {
    TrainArgs job;
    job.config_path = args.config_path;
    job.overrides = overrides;
    run.loaded = read_job_config(world, job, world_size, this_build(), args.trains);
  } else {
    run.loaded = parse_job_config(run.checkpoint->read_string(checkpoint_format::kConfig), saved_where, overrides,
                                  world_size, saved_build, args.trains);
  }
  if (!run.loaded.ok()) return run;
  const Config& cfg = run.loaded.config;
  // Only a LoRA run's checkpoint lacks its base: a whole model's weights are all in it, and a
  // --base would only have brought another model's tokenizer.
  if (!args.base.empty() && cfg.lora.rank <= 0)
    throw InputError(fmt::format("--base {}: {} is not a LoRA run's (lora.rank = 0): its weights are all in the "
                                 "checkpoint, with no base to name",
                                 args.base, args.checkpoint));
  // A LoRA checkpoint's adapters go over its run's base, model.init_from, which may have moved
  // since (a relative path was relative to where the run ran): --base names it where it is now,
  // and the adapters' check compares its tensors' checksum with the run's record. Rank 0 looks,
  // so that every rank stops alike whatever its node sees.
  if (const std::string& base = cfg.model.init_from; run.checkpoint && cfg.lora.rank > 0 && !base.empty())
    run_on_root(world, 0, [&] {
      if (std::filesystem::is_directory(base)) return;
      throw InputError(args.base.empty() ? fmt::format("{}: the run's base, model.init_from = '{}', is not a directory "
                                                       "here: pass --base DIR, the base where it is now",
                                                       args.checkpoint, base)
                                         : fmt::format("--base {}: not a directory", base));
    });
  run.base_seed = cfg.run.seed;
  if (!run.checkpoint) return run;
  // A checkpoint is used as its run's model: a --config or --set describing another is refused.
  const LoadedConfig saved = parse_job_config(run.checkpoint->read_string(checkpoint_format::kConfig), saved_where,
                                              moved_base, world_size, saved_build, /*trains=*/false);
  if (saved.ok()) {
    const ModelShape theirs = job_model_shape(saved.config), ours = job_model_shape(cfg);
    std::string d = shape_difference(theirs, ours, "in the checkpoint's run", "here");
    if (d.empty()) d = lora_difference(theirs.lora, ours.lora, "in the checkpoint's run", "here");
    if (!d.empty())
      throw InputError(fmt::format("{}: the checkpoint's model is not this job's: {}; {} uses the model its run "
                                   "trained (leave its [model] and [lora] keys as that run set them)",
                                   args.checkpoint, d, args.command));
    run.base_seed = saved.config.run.seed;
  }
  return run;
}

}  // namespace shardrl
