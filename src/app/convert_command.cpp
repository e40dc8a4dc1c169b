#include "app/convert_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>

#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>

#include "app/hf_companions.hpp"
#include "app/hf_model_files.hpp"
#include "app/job_config.hpp"
#include "config/print.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/safetensors.hpp"
#include "io/staged_directory.hpp"
#include "io/text_file.hpp"
#include "model/param_spec.hpp"
#include "mpi/communicator.hpp"
#include "mpi/device.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"
#include "job/checkpoint_format.hpp"
#include "job/hf_config.hpp"
#include "job/job_checkpoint.hpp"
#include "job/peft_adapter.hpp"
#include "job/policy.hpp"

namespace shardrl {
namespace {

// An export's checkpoint and the config it was saved with; the exports run on one process.
struct ExportSource {
  std::unique_ptr<ShardedFileReader> file;
  LoadedConfig config;
};
// None (the problem reported) where the command must exit with kExitUsage.
std::optional<ExportSource> open_export_source(const char* flag, const std::string& from, MpiSession& mpi) {
  int size = 1;
  MPI_Comm_size(mpi.world(), &size);
  if (size != 1) {
    std::cerr << "shardrl: convert " << flag << " runs as one process (started with " << size << ")\n";
    return std::nullopt;
  }
  ExportSource source;
  source.file = open_checkpoint(from, mpi.world());
  source.config = parse_saved_config(source.file->read_string(checkpoint_format::kConfig),
                                     from + ":" + checkpoint_format::kConfig);
  if (!source.config.ok()) {
    report_config_errors(source.config, 0);
    return std::nullopt;
  }
  return source;
}

// Said where an export's staging folder was left by one that was stopped (and is now removed).
void note_stale_staging(const StagedDirectory& staged) {
  if (staged.stale_removed())
    std::cout << fmt::format("note: removed {}, left by an export that was stopped\n", staged.staging().string());
}

// The names an export to a Hugging Face directory writes.
std::vector<std::string> export_names(const HfCompanions& companions) {
  std::vector<std::string> names = {"model.safetensors", "config.json"};
  for (const std::string& name : companion_names(companions)) names.push_back(name);
  return names;
}

// The config.json of an export of `shape`, once nothing stands in its way: the outputs it would
// replace, and a model's other files it would leave beside them (both refused without --force)
// and a shape transformers would compute otherwise (hf_config_json refuses it). Called before
// the weights are read: a refusal after an export's whole read (or, worse, after its weights
// were written, leaving them without a config.json) costs the user the export.
std::string checked_hf_config(const ConvertArgs& args, const ModelShape& shape, const HfCompanions& companions) {
  const std::filesystem::path dir(args.to_safetensors);
  const std::vector<std::string> written = export_names(companions);
  for (const std::string& name : written)
    if (std::filesystem::exists(dir / name) && !args.force)
      throw InputError(fmt::format("--to-safetensors: '{}' exists; pass --force to replace it",
                                   (dir / name).string()));
  if (const std::vector<std::string> left = hf_model_files_not_written(dir, written); !left.empty() && !args.force)
    throw InputError(fmt::format("--to-safetensors: '{}' holds {}: another model's files, which Hugging Face's "
                                 "readers would take with the new weights; pass --force to remove them, or export "
                                 "to another directory",
                                 dir.string(), fmt::join(left, ", ")));
  // The base's context length where the run's was set shorter (the weights do not depend on it).
  ModelShape exported = shape;
  if (companions.base_max_positions > shape.max_seq_len && companions.base_max_positions <= INT32_MAX)
    exported.max_seq_len = static_cast<int>(companions.base_max_positions);
  return hf_config_json(exported, args.dtype == "bf16" ? "bfloat16" : "float32", companions.token_ids_json);
}

// Puts the values of parameter `p` of unit `unit` (an index into the units) in `out`. The
// writer asks for the parameters in the units' order, one at a time.
using ParamValues = std::function<void(std::size_t unit, const ParamSpec& p, float* out)>;

// The parameters of `units` (their values from `values`) as a Hugging Face model directory of
// `shape` with its `config_json` (checked_hf_config) and the run's tokenizer and generation files.
void write_hf_directory(const ConvertArgs& args, const ModelShape& shape, const std::vector<UnitSpec>& units,
                        const ParamValues& values, const std::string& config_json, const HfCompanions& companions) {
  const bool bf16 = args.dtype == "bf16";
  std::vector<StWrite> tensors;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (const ParamSpec& p : units[u].params)
      tensors.push_back({p.name, p.shape, bf16 ? StDtype::bf16 : StDtype::f32, nullptr,
                         [&values, u, &p](float* out) { values(u, p, out); }});
  const std::filesystem::path dir(args.to_safetensors);
  StagedDirectory staged(dir);   // the files replace those of the same names together, at the end
  note_stale_staging(staged);
  write_safetensors(staged.staging() / "model.safetensors", tensors,
                    {{"format", "pt"}, {"shardrl_checkpoint", args.from}});
  write_text_atomically(staged.staging() / "config.json", config_json);
  write_hf_companions(companions, staged.staging());
  staged.commit("config.json");
  // The other model's files (--force; refused without it), removed once the new ones are in place.
  if (const std::vector<std::string> left = hf_model_files_not_written(dir, export_names(companions));
      args.force && !left.empty()) {
    for (const std::string& name : left) std::filesystem::remove(dir / name);
    std::cout << fmt::format("removed {} from {} (--force): the files of the model that was there\n",
                             fmt::join(left, ", "), dir.string());
  }
  std::cout << fmt::format("{} tensors ({} parameters, {}) -> {}\n", tensors.size(), shape.parameter_count(),
                           bf16 ? "BF16" : "F32", dir.string());
}

// A LoRA run's checkpoint -> its merged model as a Hugging Face directory, on one process: the
// policy built as the run built it (its base from model.init_from, checked against the
// checkpoint's record, or its seeded random one), the adapters loaded, then every adapted weight
// W + (alpha / rank) B A, summed in fp64 from the fp32 adapters and the base.
int export_merged(const ConvertArgs& args, MpiSession& mpi, Config cfg, bool trained) {
  // Only the weights are needed: no batch beyond one token (the activations sized by it).
  cfg.train.micro_batch_size = 1;
  cfg.train.seq_len = 1;
  // The base where it is now: a relative model.init_from was relative to where the run ran, and a
  // base may move (the checkpoint's record of its tensors' checksum decides whether it is the one).
  if (!args.base.empty()) cfg.model.init_from = args.base;
  if (!cfg.model.init_from.empty() && !std::filesystem::is_directory(cfg.model.init_from))
    throw InputError(fmt::format("--merged: the run's base, model.init_from = '{}', is not a directory here: pass "
                                 "--base DIR, the base where it is now (its tensors' checksum is checked against "
                                 "the run's)",
                                 cfg.model.init_from));
  const ModelShape base_shape = resolve_model_shape(cfg.model);
  const HfCompanions companions = hf_companions(cfg, trained);
  const std::string config_json = checked_hf_config(args, base_shape, companions);
  const ProcessLayout layout = ProcessLayout::discover(mpi.world());
  const DeviceBinding device = bind_device(layout);
  KokkosRuntime kokkos(device.device_id);
  auto comm = make_communicator(kDeviceIsGpu ? CommBackendKind::nccl : CommBackendKind::mpi, mpi.world(),
                                cfg.comm.timeout_s);
  Policy policy(cfg, *comm);
  if (policy.base_from_init_from()) policy.load_init_from(mpi.world(), /*adapters=*/false);   // the checkpoint's
  load_policy_weights(args.from, policy, mpi.world());
  const LoraShape& lora = policy.model().options().shape.lora;
  const std::vector<UnitSpec> base_units = model_units(base_shape);
  const std::vector<UnitSpec>& units = policy.model().units();
  // One unit gathered at a time, as the writer reaches its parameters.
  std::size_t gathered_unit = units.size();
  std::vector<float> unit;
  const ParamValues values = [&](std::size_t u, const ParamSpec& p, float* w) {
    if (gathered_unit != u) {
      unit = policy.trainer().gather_main_weights(static_cast<int>(u));
      gathered_unit = u;
    }
    auto param = [&](const std::string& name) -> const ParamSpec* {
      for (const ParamSpec& q : units[u].params)
        if (q.name == name) return &q;
      return nullptr;
    };
    const ParamSpec* mine = param(p.name);
    SHARDRL_CHECK(mine != nullptr && mine->shape == p.shape, "the LoRA model's base parameters are its base's");
    std::copy(unit.begin() + mine->offset, unit.begin() + mine->offset + p.numel(), w);
    const std::string stem = p.name.substr(0, p.name.size() - std::string(".weight").size());
    const ParamSpec* a = param(stem + ".lora_A.weight");
    const ParamSpec* b = param(stem + ".lora_B.weight");
    if (a == nullptr || b == nullptr) return;   // not adapted
    const std::int64_t out = p.shape[0], in = p.shape[1], r = lora.rank;
    const float* A = unit.data() + a->offset;   // (r, in)
    const float* B = unit.data() + b->offset;   // (out, r)
    std::vector<double> row(static_cast<std::size_t>(in));   // row i of B A, rows of A in order (vectorises)
    for (std::int64_t i = 0; i < out; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (std::int64_t k = 0; k < r; ++k) {
        const double bik = B[i * r + k];
        for (std::int64_t j = 0; j < in; ++j) row[j] += bik * A[k * in + j];
      }
      for (std::int64_t j = 0; j < in; ++j)
        w[i * in + j] = static_cast<float>(w[i * in + j] + static_cast<double>(lora.scale()) * row[j]);
    }
  };
  write_hf_directory(args, base_shape, base_units, values, config_json, companions);
  return 0;
}

// Checkpoint -> Hugging Face directory, on one process.
int export_safetensors(const ConvertArgs& given, MpiSession& mpi) {
  std::optional<ExportSource> source = open_export_source("--to-safetensors", given.from, mpi);
  if (!source) return kExitUsage;
  const LoadedConfig& loaded = source->config;
  // The weights as the run held them unless --dtype says otherwise: an fp32 run's export is not
  // rounded unasked.
  ConvertArgs args = given;
  if (args.dtype.empty()) args.dtype = loaded.config.model.precision == Precision::fp32 ? "fp32" : "bf16";
  const bool lora = loaded.config.lora.rank > 0;
  if (lora && !args.merged)
    throw InputError(fmt::format("{}: a LoRA run's checkpoint holds its adapters only: --to-peft exports them, "
                                 "--to-safetensors DIR --merged the model with them folded in",
                                 args.from));
  if (!lora && args.merged)
    throw InputError(fmt::format("--merged: {} is not a LoRA run's checkpoint (lora.rank = 0): --to-safetensors "
                                 "alone exports its model",
                                 args.from));
  // Steps taken (not a checkpoint `convert --from-safetensors` wrote): the run has an end id it
  // learned.
  const bool trained = source->file->read_int64(checkpoint_format::kIterationsDone) +
                           source->file->read_int64(checkpoint_format::kWarmupStepsDone) >
                       0;
  if (lora) {
    const Config cfg = loaded.config;
    source.reset();   // the policy opens the checkpoint again, collectively
    return export_merged(args, mpi, cfg, trained);
  }
  ShardedFileReader& checkpoint = *source->file;
  const ModelShape shape = resolve_model_shape(loaded.config.model);
  const HfCompanions companions = hf_companions(loaded.config, trained);
  const std::string config_json = checked_hf_config(args, shape, companions);
  const std::vector<UnitSpec> units = model_units(shape);
  // Each parameter whole, read when the writer reaches it (the file's data follow the model's
  // layout), so the export holds one tensor in memory, not the model.
  const ParamValues values = [&](std::size_t, const ParamSpec& p, float* out) {
    checkpoint.read(checkpoint_format::kModel + p.name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()), 0,
                    static_cast<std::uint64_t>(p.numel()), out, loaded.config.checkpoint.verify);
  };
  write_hf_directory(args, shape, units, values, config_json, companions);
  return 0;
}

// A LoRA run's checkpoint -> PEFT adapter directory, on one process: adapter_model.safetensors
// with every adapter under PEFT's name for a causal LM (`base_model.model.` + shardrl's, which are
// the Hugging Face module names) and adapter_config.json (job/peft_adapter.hpp).
int export_peft(const ConvertArgs& given, MpiSession& mpi) {
  // The adapters as the run trained them (fp32) unless --dtype says otherwise.
  ConvertArgs args = given;
  if (args.dtype.empty()) args.dtype = "fp32";
  std::optional<ExportSource> source = open_export_source("--to-peft", args.from, mpi);
  if (!source) return kExitUsage;
  ShardedFileReader& checkpoint = *source->file;
  const LoadedConfig& loaded = source->config;
  if (loaded.config.lora.rank <= 0)
    throw InputError(fmt::format("--to-peft: {} is not a LoRA run's checkpoint (lora.rank = 0); --to-safetensors "
                                 "exports its model",
                                 args.from));
  const ModelShape shape = job_model_shape(loaded.config);
  const bool bf16 = args.dtype == "bf16";
  const std::filesystem::path dir(args.to_peft);
  const std::vector<std::string> written = {"adapter_model.safetensors", "adapter_config.json"};
  for (const std::string& name : written)
    if (std::filesystem::exists(dir / name) && !args.force)
      throw InputError(fmt::format("--to-peft: '{}' exists; pass --force to replace it", (dir / name).string()));
  // Other adapter files there (adapter_model.bin) would be another run's adapters beside these.
  std::vector<std::string> other_adapters;
  for (const std::string& name : hf_model_files_not_written(dir, written))
    if (name.rfind("adapter_", 0) == 0) other_adapters.push_back(name);
  if (!other_adapters.empty() && !args.force)
    throw InputError(fmt::format("--to-peft: '{}' holds {}: another run's adapters, which PEFT could take with these; "
                                 "pass --force to remove them, or export to another directory",
                                 dir.string(), fmt::join(other_adapters, ", ")));
  std::vector<std::vector<float>> values;
  std::vector<const ParamSpec*> adapters;   // into `units`
  const std::vector<UnitSpec> units = model_units(shape);
  for (const UnitSpec& unit : units)
    for (const ParamSpec& p : unit.params)
      if (unit.trains(p, true)) {
        values.emplace_back(static_cast<std::size_t>(p.numel()));
        checkpoint.read(checkpoint_format::kModel + p.name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()),
                        0, static_cast<std::uint64_t>(p.numel()), values.back().data(),
                        loaded.config.checkpoint.verify);
        adapters.push_back(&p);
      }
  std::vector<StWrite> tensors;
  for (std::size_t i = 0; i < adapters.size(); ++i)
    tensors.push_back({peft_tensor_name(adapters[i]->name), adapters[i]->shape, bf16 ? StDtype::bf16 : StDtype::f32,
                       values[i].data()});
  StagedDirectory staged(dir);   // both files replace those of the same names together, at the end
  note_stale_staging(staged);
  write_safetensors(staged.staging() / "adapter_model.safetensors", tensors,
                    {{"format", "pt"}, {"shardrl_checkpoint", args.from}});
  // base_model_name_or_path: where the base is, for PEFT to load it from any directory (an
  // absolute path where the relative one names a directory here; as written otherwise, e.g. a
  // Hub name).
  std::string base = args.base.empty() ? loaded.config.model.init_from : args.base;
  if (!base.empty() && std::filesystem::is_directory(base))
    base = std::filesystem::absolute(base).lexically_normal().string();
  write_text_atomically(staged.staging() / "adapter_config.json", peft_adapter_config_json(shape, base));
  staged.commit("adapter_config.json");
  for (const std::string& name : other_adapters) std::filesystem::remove(dir / name);
  if (!other_adapters.empty())
    std::cout << fmt::format("removed {} from {} (--force): another run's adapters\n", fmt::join(other_adapters, ", "),
                             dir.string());
  std::cout << fmt::format("{} adapter tensors ({} parameters, rank {}, {}) -> {}\n", tensors.size(),
                           shape.adapter_count(), shape.lora.rank, bf16 ? "BF16" : "F32", dir.string());
  return 0;
}

// Hugging Face directory -> checkpoint (iteration 0, optimizer state zero), on any number of
// ranks: each reads its slices and writes them, as a job does.
int import_safetensors(const ConvertArgs& args, MpiSession& mpi) {
  ProcessLayout layout = ProcessLayout::discover(mpi.world());
  const std::filesystem::path dir(args.from_safetensors), to(args.to);
  // Every rank reads config.json: one that cannot (a node-local path) stops them all here.
  std::string toml;
  run_on_every_rank(mpi.world(), [&] { toml = hf_job_config_toml(dir); });
  const LoadedConfig loaded = parse_job_config(toml, (dir / "config.json").string() + " (as a job)", {},
                                               layout.world_size);
  if (!loaded.ok()) {
    report_config_errors(loaded, layout.world_rank);
    return kExitUsage;
  }
  const Config& cfg = loaded.config;
  run_on_root(mpi.world(), 0, [&] {
    std::error_code ec;
    if (std::filesystem::is_directory(to, ec))
      throw InputError(fmt::format("--to: '{}' is a directory; name the checkpoint file to write", to.string()));
    if (std::filesystem::exists(to, ec) && !args.force)
      throw InputError(fmt::format("--to: '{}' exists; pass --force to replace it", to.string()));
    // The staging directory below is removed whole at the end: never one that holds anything else.
    if (const std::filesystem::path staging = to.string() + ".convert.d"; std::filesystem::exists(staging, ec))
      throw InputError(fmt::format("'{}' exists (left by a convert that was stopped, or not convert's): move or "
                                   "remove it first",
                                   staging.string()));
  });
  const DeviceBinding device = bind_device(layout);
  KokkosRuntime kokkos(device.device_id);
  auto comm = make_communicator(kDeviceIsGpu ? CommBackendKind::nccl : CommBackendKind::mpi, mpi.world(),
                                cfg.comm.timeout_s);
  Policy policy(cfg, *comm);
  policy.load_init_from(mpi.world(), /*adapters=*/true);   // cfg.model.init_from is `dir`
  // Saved as a job's checkpoint in a directory of its own beside `to` (checked absent), then moved there.
  const std::filesystem::path staging = to.string() + ".convert.d";
  save_job_checkpoint(staging, JobPosition{}, policy, to_toml(cfg), mpi.world());
  run_on_root(mpi.world(), 0, [&] {
    std::filesystem::rename(checkpoint_path(staging, 0), to);
    std::filesystem::remove_all(staging);
    std::cout << fmt::format("{} parameters from {} -> {}\n", policy.model().options().shape.parameter_count(), dir.string(),
                             to.string());
  });
  return 0;
}

}  // namespace

int run_convert(const ConvertArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  int rank = 0;
  MPI_Comm_rank(mpi.world(), &rank);
  const bool to_hf = !args.from.empty() || !args.to_safetensors.empty() || !args.to_peft.empty();
  const bool from_hf = !args.from_safetensors.empty() || !args.to.empty();
  const bool one_output = args.to_safetensors.empty() != args.to_peft.empty();
  if (!args.base.empty() && !args.merged && args.to_peft.empty()) {
    if (rank == 0) std::cerr << "shardrl: convert --base goes with --merged or --to-peft (a LoRA run's base)\n";
    return kExitUsage;
  }
  if (args.merged && args.to_safetensors.empty()) {
    if (rank == 0) std::cerr << "shardrl: convert --merged goes with --from CKPT.h5 --to-safetensors DIR\n";
    return kExitUsage;
  }
  if (to_hf == from_hf || (to_hf && (args.from.empty() || !one_output)) ||
      (from_hf && (args.from_safetensors.empty() || args.to.empty()))) {
    if (rank == 0)
      std::cerr << "shardrl: convert takes --from CKPT.h5 --to-safetensors DIR, --from CKPT.h5 --to-peft DIR, or "
                   "--from-safetensors DIR --to CKPT.h5\n";
    return kExitUsage;
  }
  try {
    if (!args.to_peft.empty()) return export_peft(args, mpi);
    return to_hf ? export_safetensors(args, mpi) : import_safetensors(args, mpi);
  } catch (const InputError& e) {   // raised alike on every rank
    if (rank == 0) print_error(e.what());
    return kExitUsage;
  } catch (const std::filesystem::filesystem_error& e) {   // export runs on one process
    print_error(e.what());
    return kExitUsage;
  }
}

}  // namespace shardrl
