#include "job/job_checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "config/model_presets.hpp"
#include "core/error.hpp"
#include "core/progress_meter.hpp"
#include "core/version.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/sharded_file.hpp"
#include "job/checkpoint_format.hpp"
#include "mpi/host_exchange.hpp"

namespace shardrl {
namespace {

namespace f = checkpoint_format;

// The states a checkpoint holds per parameter, and their group in the file.
struct StateGroup {
  SliceState state;
  const char* group;
};
std::vector<StateGroup> state_groups(const ShardedTrainer& trainer) {
  std::vector<StateGroup> g{{SliceState::main, f::kModel},
                            {SliceState::exp_avg, f::kExpAvg},
                            {SliceState::exp_avg_sq, f::kExpAvgSq}};
  if (trainer.keeps_reference()) g.push_back({SliceState::reference, f::kReference});
  return g;
}

std::int64_t tensor_count(const std::vector<UnitSpec>& units) {
  std::int64_t n = 0;
  for (const UnitSpec& u : units) n += static_cast<std::int64_t>(u.params.size());
  return n;
}

std::vector<std::uint64_t> global_shape(const ParamSpec& p) {
  return std::vector<std::uint64_t>(p.shape.begin(), p.shape.end());
}

// One state of every unit from the file into this rank's slices (any world size at save).
void read_state(ShardedFileReader& in, const StateGroup& g, ShardedTrainer& trainer,
                const std::vector<UnitSpec>& units, bool verify, ProgressMeter& meter) {
  const bool lora = trainer.lora();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    // Alignment gaps and padding stay 0. With LoRA only the adapters are in the checkpoint.
    std::vector<float> slice(static_cast<std::size_t>(trainer.state_elements(u, g.state)), 0.0f);
    for (const ParamSpec& p : units[u].params) {
      if (!units[u].trains(p, lora)) continue;
      const ParamOverlap o = trainer.layout().state_overlap(u, p);
      in.read(g.group + p.name, global_shape(p), static_cast<std::uint64_t>(o.first),
              static_cast<std::uint64_t>(o.count), slice.data() + o.at, verify);
      meter.advance();
    }
    trainer.write_slice(u, g.state, slice);
  }
}

// A LoRA checkpoint's adapters are loaded only over the base they were trained over: one of the
// same checksum (wherever its directory is now), or the same random initialisation.
void check_lora_base(ShardedFileReader& in, const std::filesystem::path& file, const Policy& policy) {
  if (policy.config().lora.rank <= 0) return;
  if (!in.has(f::kLoraBase))
    throw InputError(fmt::format("{}: this LoRA job needs a checkpoint of LoRA adapters, and it has none ({} missing)",
                                 file.string(), f::kLoraBase));
  const LoraBase& now = policy.lora_base();
  const LoraBase saved{in.read_string(f::kLoraBase), in.has(f::kLoraBaseChecksum) ? in.read_int64(f::kLoraBaseChecksum)
                                                                                   : -1};
  const bool same = saved.checksum >= 0 || now.checksum >= 0 ? saved.checksum == now.checksum
                                                             : saved.description == now.description;
  auto name = [](const LoraBase& b) {
    return b.checksum < 0 ? b.description : fmt::format("{}, tensors' checksum {:08x}", b.description, b.checksum);
  };
  if (!same)
    throw InputError(fmt::format("{}: its LoRA adapters were trained over another base ({}); this job's base is {}",
                                 file.string(), name(saved), name(now)));
}

}  // namespace

std::string model_summary(const Config& config) {
  const ModelShape s = resolve_model_shape(config.model);
  return fmt::format("{}: vocab_size={} d_model={} n_layers={} n_heads={} n_kv_heads={} head_dim={} d_ff={} "
                     "qk_norm={} tie_embeddings={} max_seq_len={}",
                     config.model.preset, s.vocab_size, s.d_model, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim,
                     s.d_ff, s.qk_norm, s.tie_embeddings, s.max_seq_len);
}

std::vector<std::string> missing_tensors(const ShardedFileReader& in, const Config& config) {
  const bool lora = config.lora.rank > 0;   // the adapters only; the base is the reference
  std::vector<const char*> groups{f::kModel, f::kExpAvg, f::kExpAvgSq};
  if (config.rl.kl_coef > 0 && !lora) groups.push_back(f::kReference);
  std::vector<std::string> missing;
  for (const UnitSpec& unit : model_units(job_model_shape(config)))
    for (const ParamSpec& p : unit.params)
      for (const char* g : groups)
        if (unit.trains(p, lora) && !in.has(g + p.name)) missing.push_back(g + p.name);
  return missing;
}

CheckpointManifest checkpoint_manifest(const JobPosition& position, Policy& policy, const std::string& config_toml,
                                       MPI_Comm comm) {
  const ShardedTrainer& trainer = policy.trainer();
  const std::vector<UnitSpec>& units = policy.model().units();
  const Config& config = policy.config();
  int world = 1;
  MPI_Comm_size(comm, &world);
  CheckpointManifest m;
  m.iteration = position.iterations_done;
  m.values = {{f::kFormatVersion, std::int64_t{f::kVersion}},
              {f::kShardrlVersion, std::string(kVersion)},
              {f::kWorldSize, std::int64_t{world}},
              {f::kIteration, position.iterations_done},
              {f::kModelSummary, model_summary(config)},
              {f::kConfig, config_toml}};
  if (trainer.lora()) {
    m.values.emplace_back(f::kLoraBase, policy.lora_base().description);
    if (policy.lora_base().checksum >= 0) m.values.emplace_back(f::kLoraBaseChecksum, policy.lora_base().checksum);
  }
  const StepMetrics steps = trainer.metrics();
  m.values.insert(m.values.end(),
                  {{f::kSeed, config.run.seed},
                   {f::kRngScheme, std::string("counter-based: every draw is a function of (seed, iteration, prompt, "
                                               "sample, token); no generator state")},
                   {f::kTask, config.rl.task},
                   {f::kIterationsDone, position.iterations_done},
                   {f::kWarmupStepsDone, position.warmup_steps_done},
                   {f::kOptimStep, steps.step},
                   {f::kOptimSkipped, steps.skipped},
                   {f::kOptimScheduleStart, steps.schedule_start}});
  if (policy.task_checksum() >= 0) m.values.emplace_back(f::kTaskChecksum, policy.task_checksum());
  m.values.emplace_back(f::kMetadataChecksum, f::metadata_checksum(m.values));   // last: over all of the above
  for (const StateGroup& g : state_groups(trainer))
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      CheckpointManifest::Slice slice{u, g.state, trainer.state_elements(u, g.state), {}};
      for (const ParamSpec& p : units[u].params) {
        if (!units[u].trains(p, trainer.lora())) continue;   // LoRA: the adapters only
        const ParamOverlap o = trainer.layout().state_overlap(u, p);
        slice.tensors.push_back({g.group + p.name, global_shape(p), static_cast<std::uint64_t>(o.first),
                                 static_cast<std::uint64_t>(o.count), o.at});
      }
      m.slices.push_back(std::move(slice));
    }
  m.keep_last = config.checkpoint.keep_last;
  m.keep_every = config.checkpoint.keep_every;
  m.fail_commit = config.debug.fail_io == FailIo::commit && position.iterations_done == config.debug.fail_io_iteration;
  m.fail_write = config.debug.fail_io == FailIo::write && position.iterations_done == config.debug.fail_io_iteration;
  m.pause_between_tensors_ms = config.debug.save_pause_ms;
  return m;
}

std::int64_t CheckpointManifest::state_elements() const {
  std::int64_t n = 0;
  for (const Slice& s : slices) n += s.elements;
  return n;
}

void write_checkpoint(const std::filesystem::path& dir, const CheckpointManifest& m,
                      const std::function<const float*(std::size_t slice)>& values, MPI_Comm comm,
                      bool show_progress) {
  run_on_root(comm, 0, [&] { std::filesystem::create_directories(dir); });
  const auto pause = std::chrono::milliseconds(m.pause_between_tensors_ms);
  {
    ShardedFileWriter file(checkpoint_partial_path(dir, m.iteration), comm);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    if (m.fail_write && rank == ranks - 1) file.fail_next_transfer_for_test();
    for (const auto& [name, value] : m.values) {
      if (const auto* s = std::get_if<std::string>(&value)) file.write_string(name, *s);
      else file.write_int64(name, std::get<std::int64_t>(value));
    }
    std::int64_t tensors = 0;
    for (const CheckpointManifest::Slice& s : m.slices) tensors += static_cast<std::int64_t>(s.tensors.size());
    std::optional<ProgressMeter> meter;
    if (show_progress) meter.emplace("saving checkpoint", tensors);
    for (std::size_t i = 0; i < m.slices.size(); ++i) {
      const float* slice = values(i);
      for (const CheckpointManifest::Tensor& t : m.slices[i].tensors) {
        file.write(t.name, t.shape, t.first, t.count, slice + t.at);
        if (pause.count() > 0) std::this_thread::sleep_for(pause);
        if (meter) meter->advance();
      }
    }
    file.close();
  }
  // Every rank returns once the checkpoint is committed, or throws rank 0's reason.
  run_on_root(comm, 0, [&] {
    if (m.fail_commit)
      throw InputError(fmt::format("cannot commit '{}': No space left on device (injected: debug.fail_io = "
                                   "\"commit\")",
                                   checkpoint_partial_path(dir, m.iteration).string()));
    commit_checkpoint(dir, m.iteration);
    apply_retention(dir, m.keep_last, m.keep_every);
  });
}

void save_job_checkpoint(const std::filesystem::path& dir, const JobPosition& position, Policy& policy,
                         const std::string& config_toml, MPI_Comm comm) {
  const CheckpointManifest m = checkpoint_manifest(position, policy, config_toml, comm);
  std::vector<float> slice;   // one unit's state at a time
  write_checkpoint(
      dir, m,
      [&](std::size_t i) {
        slice = policy.trainer().read_slice(m.slices[i].unit, m.slices[i].state);
        return slice.data();
      },
      comm, /*show_progress=*/true);
}

JobPosition load_job_checkpoint(const std::filesystem::path& file, Policy& policy, MPI_Comm comm) {
  ShardedTrainer& trainer = policy.trainer();
  const std::vector<UnitSpec>& units = policy.model().units();
  const Config& config = policy.config();
  const std::unique_ptr<ShardedFileReader> opened = open_checkpoint(file, comm);
  ShardedFileReader& in = *opened;
  check_lora_base(in, file, policy);
  if (const std::vector<std::string> missing = missing_tensors(in, config); !missing.empty())
    throw InputError(fmt::format("{}: incomplete checkpoint: {} tensor(s) this job needs are missing, the first {}",
                                 file.string(), missing.size(), missing.front()));
  const std::vector<StateGroup> groups = state_groups(trainer);
  ProgressMeter meter("loading checkpoint", static_cast<std::int64_t>(groups.size()) * tensor_count(units));
  for (const StateGroup& g : groups) read_state(in, g, trainer, units, config.checkpoint.verify, meter);
  trainer.set_step_counters(in.read_int64(f::kOptimStep), in.read_int64(f::kOptimSkipped),
                            in.has(f::kOptimScheduleStart) ? in.read_int64(f::kOptimScheduleStart) : 0);
  JobPosition position;
  position.iterations_done = in.read_int64(f::kIterationsDone);
  position.warmup_steps_done = in.read_int64(f::kWarmupStepsDone);
  return position;
}

void load_policy_weights(const std::filesystem::path& file, Policy& policy, MPI_Comm comm) {
  ShardedTrainer& trainer = policy.trainer();
  const std::vector<UnitSpec>& units = policy.model().units();
  const bool verify = policy.config().checkpoint.verify;
  const std::unique_ptr<ShardedFileReader> in = open_checkpoint(file, comm);
  check_lora_base(*in, file, policy);
  ProgressMeter meter("loading weights", tensor_count(units));
  read_state(*in, StateGroup{SliceState::main, f::kModel}, trainer, units, verify, meter);
}

}  // namespace shardrl
