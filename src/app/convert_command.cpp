#include "app/convert_command.hpp"

#include <fmt/format.h>

#include <iostream>

#include "rl/hf_config.hpp"
#include "app/job_config.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "io/sharded_file.hpp"
#include "io/text_file.hpp"
#include "model/param_spec.hpp"
#include "mpi/session.hpp"

namespace shardrl {

int run_convert(const ConvertArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(mpi.world(), &rank);
  MPI_Comm_size(mpi.world(), &size);
  if (size != 1) {
    if (rank == 0) std::cerr << "shardrl: convert runs as one process (started with " << size << ")\n";
    return kExitUsage;
  }
  try {
    ShardedFileReader checkpoint(args.from, mpi.world());
    const LoadedConfig loaded =
        parse_job_config(checkpoint.read_string("/meta/config"), args.from + ":/meta/config", {}, 1);
    if (!loaded.ok()) {
      report_config_errors(loaded, 0);
      return kExitUsage;
    }
    const ModelShape shape = resolve_model_shape(loaded.config.model);
    const bool bf16 = args.dtype == "bf16";
    const std::string config_json = hf_config_json(shape, bf16 ? "bfloat16" : "float32");
    // Every parameter whole, in the units' order (so the file's data follow the model's layout).
    std::vector<std::vector<float>> values;
    std::vector<StWrite> tensors;
    for (const UnitSpec& unit : model_units(shape))
      for (const ParamSpec& p : unit.params) {
        values.emplace_back(static_cast<std::size_t>(p.numel()));
        checkpoint.read("/model/" + p.name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()), 0,
                        static_cast<std::uint64_t>(p.numel()), values.back().data(), loaded.config.checkpoint.verify);
      }
    std::size_t i = 0;
    for (const UnitSpec& unit : model_units(shape))
      for (const ParamSpec& p : unit.params)
        tensors.push_back({p.name, p.shape, bf16 ? StDtype::bf16 : StDtype::f32, values[i++].data()});
    const std::filesystem::path dir(args.to_safetensors);
    write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}, {"shardrl_checkpoint", args.from}});
    write_text_atomically(dir / "config.json", config_json);
    std::cout << fmt::format("{} tensors ({} parameters, {}) -> {}\n", tensors.size(), shape.parameter_count(),
                             bf16 ? "BF16" : "F32", dir.string());
  } catch (const InputError& e) {
    std::cerr << "shardrl: " << e.what() << "\n";
    return kExitUsage;
  }
  return 0;
}

}  // namespace shardrl
