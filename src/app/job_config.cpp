#include "app/job_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "app/printable_line.hpp"
#include "config/model_presets.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "mpi/host_exchange.hpp"
#include "job/hf_config.hpp"

namespace shardrl {

LoadedConfig read_job_config(MPI_Comm world, const TrainArgs& args, int world_size, const BuildInfo& build,
                             bool trains) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::string text, read_error;
  if (rank == 0) {
    try {
      text = read_input_file(args.config_path, "config file");
    } catch (const InputError& e) {
      read_error = e.what();
    }
  }
  broadcast_string(world, read_error, 0);
  if (!read_error.empty()) {
    LoadedConfig failed;
    failed.errors.push_back(read_error);
    return failed;
  }
  broadcast_string(world, text, 0);
  LoadedConfig loaded =
      parse_job_config(text, args.config_path, args.overrides, world_size, build, trains);
  // model.init_from with preset = "custom": the directory's config.json gives the shape keys the
  // config does not set, as overrides (read on rank 0, like the file itself); those it sets win
  // (a shorter model.max_seq_len). The resolved config then holds the shape, so a resumed job
  // needs the directory no more. (Any shape key given once stopped the read: the rest kept the
  // tiny defaults, and the job failed only when it loaded the weights.)
  const ModelConfig& model = loaded.config.model;
  const auto given = [&](const std::string& k) {
    const auto it = loaded.origin.find("model." + k);
    return it != loaded.origin.end() && it->second != "default";
  };
  const bool shape_given = std::any_of(model_shape_keys().begin(), model_shape_keys().end(), given);
  const bool shape_complete = std::all_of(model_shape_keys().begin(), model_shape_keys().end(), given);
  if (model.init_from.empty() || model.preset != "custom" || shape_complete) return loaded;
  const std::string json_path = (std::filesystem::path(model.init_from) / "config.json").string();
  std::string json;
  read_error.clear();
  // A shape given in part over a directory without config.json (safetensors alone): the weights'
  // own check names what does not fit when they load.
  std::string absent = rank == 0 && shape_given && !std::filesystem::exists(json_path) ? "absent" : "";
  broadcast_string(world, absent, 0);
  if (!absent.empty()) return loaded;
  if (rank == 0) {
    if (const std::string problem = input_file_problem(json_path); !problem.empty())
      read_error = fmt::format("{}: model.init_from = \"{}\" with preset = \"custom\" takes the shape{} from "
                               "'{}', which cannot be read: {}",
                               loaded.origin.at("model.init_from"), model.init_from,
                               shape_given ? " keys the config does not set" : "", json_path, problem);
    else
      try {
        json = read_input_file(json_path, "model config");
      } catch (const InputError& e) {   // the file changed since the check: still every rank's error
        read_error = e.what();
      }
  }
  broadcast_string(world, read_error, 0);
  broadcast_string(world, json, 0);
  std::vector<std::string> overrides = args.overrides;
  std::vector<std::string> from_json;
  try {
    if (read_error.empty())
      for (std::string& kv : shape_overrides(shape_from_hf_config(json, json_path)))
        if (!given(kv.substr(kv.find('.') + 1, kv.find('=') - kv.find('.') - 1))) from_json.push_back(std::move(kv));
  } catch (const InputError& e) {
    read_error = e.what();
  }
  // The shape's source unreadable: that error alone. The first parse's checked the tiny default
  // shape, not the job's, and its errors (a sequence past the default's max_seq_len, an end id
  // outside its vocabulary) follow from that, listed before the cause.
  if (!read_error.empty()) {
    loaded.errors = {read_error};
    return loaded;
  }
  overrides.insert(overrides.end(), from_json.begin(), from_json.end());
  loaded = parse_job_config(text, args.config_path, overrides, world_size, build, trains);
  for (const std::string& kv : from_json) loaded.origin[kv.substr(0, kv.find('='))] = json_path;
  // The shape's problems name config.json, not the overrides it was passed as (never typed).
  for (std::string& e : loaded.errors)
    for (const std::string& kv : from_json)
      for (std::size_t at = e.find("--set " + kv + ":"); at != std::string::npos;
           at = e.find("--set " + kv + ":", at + json_path.size()))
        e.replace(at, 6 + kv.size(), json_path);
  return loaded;
}

LoadedConfig parse_job_config(const std::string& text, const std::string& source,
                              const std::vector<std::string>& overrides, int world_size, const BuildInfo& build,
                              bool trains) {
  LoadedConfig loaded = load_config(text, source, overrides, build);
  if (loaded.ok() && world_size > 0)
    for (auto& e : check_for_job(loaded, world_size, trains)) loaded.errors.push_back(std::move(e));
  return loaded;
}

LoadedConfig parse_saved_config(const std::string& text, const std::string& source) {
  // GPU-only settings pass as on a GPU build, and CPU-only ones (comm.backend = "mpi") as on a
  // CPU build: a CPU run's saved config was refused as a CUDA build's, and a resume then skipped
  // its check of config changes.
  BuildInfo any_build;
  any_build.has_cuda = true;
  any_build.has_cudnn = true;
  any_build.any = true;
  return load_config(text, source, {}, any_build);
}

void report_config_errors(const LoadedConfig& loaded, int rank) {
  if (rank != 0) return;
  std::string msg = fmt::format("shardrl: invalid configuration ({} problem{}):\n", loaded.errors.size(),
                                loaded.errors.size() == 1 ? "" : "s");
  for (const auto& e : loaded.errors) msg += "  " + with_invalid_utf8_escaped(e) + "\n";
  std::cerr << msg << std::flush;
}

}  // namespace shardrl
