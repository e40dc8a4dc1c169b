#include "job/hf_weights.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/progress_meter.hpp"
#include "io/json_parse_message.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_checksum.hpp"
#include "job/hf_config.hpp"
#include "mpi/host_exchange.hpp"

namespace shardrl {
namespace {

std::string slurp(const std::filesystem::path& p) { return read_input_file(p, "model file"); }

// load_hf_weights' checksum from every rank's slices of the tensors read.
std::uint32_t base_checksum(const std::vector<Slice>& slices, const std::vector<UnitSpec>& units, bool lora) {
  std::map<std::uint64_t, std::vector<Slice>> of_tensor;
  for (const Slice& s : slices) of_tensor[s.key].push_back(s);
  std::vector<unsigned char> crcs;
  for (const UnitSpec& unit : units)
    for (const ParamSpec& p : unit.params) {
      if (lora && unit.trains(p, lora)) continue;
      const std::uint64_t key = tensor_key(p.name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()));
      const std::uint32_t crc = combine_slices(of_tensor[key], static_cast<std::uint64_t>(p.numel()), p.name);
      for (int b = 0; b < 4; ++b) crcs.push_back(static_cast<unsigned char>(crc >> (8 * b)));
    }
  return crc32_bytes(0, crcs.data(), crcs.size());
}

}  // namespace

std::uint32_t load_hf_weights(const std::filesystem::path& dir, ShardedTrainer& trainer,
                              const std::vector<UnitSpec>& units, const ModelShape& shape, MPI_Comm comm) {
  // This rank's first problem: a file it cannot read or that does not fit (a path only some
  // ranks see, a node-local copy that differs), a read of its own slices that failed, a NaN or an
  // Inf. Every rank reaches the agreement below with it, so none waits there for a rank that
  // stopped.
  std::string problem;
  std::vector<Slice> read;   // this rank's part of each tensor, for the checksum
  std::vector<std::string> unused;   // the directory's tensors that no parameter takes
  const bool lora = trainer.lora();
  try {
    const std::filesystem::path config = dir / "config.json";
    const ModelShape theirs = shape_from_hf_config(slurp(config), config.string());
    if (const std::string d = shape_difference(theirs, shape, "there", "in the job's [model]"); !d.empty())
      throw InputError(config.string() + ": describes another model than the job's: " + d +
                       " (set the [model] keys to match: preset = \"custom\" and the shape keys)");
    // Which file holds each tensor.
    std::map<std::string, std::filesystem::path> file_of;
    const std::filesystem::path index = dir / "model.safetensors.index.json";
    const bool indexed = std::filesystem::exists(index);
    // Both: transformers loads model.safetensors and shardrl would read the index's shards, so a
    // stale one of them would give the two different weights.
    if (indexed && std::filesystem::exists(dir / "model.safetensors"))
      throw InputError(fmt::format("{} holds both model.safetensors and model.safetensors.index.json (transformers "
                                   "loads the first, the index's shards would be read here): remove the stale one",
                                   dir.string()));
    if (indexed) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(slurp(index));
      } catch (const nlohmann::json::exception& e) {
        throw InputError(index.string() + ": not valid JSON: " + json_parse_message(e.what()));
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw InputError(index.string() + ": no weight_map object");
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          throw InputError(index.string() + ": weight_map of '" + it.key() + "' is not a file name");
        // A shard is a file of the directory itself: never a path that leaves it.
        const std::filesystem::path shard(it.value().get<std::string>());
        if (shard.empty() || shard.is_absolute() || shard.has_parent_path() || shard == "." || shard == "..")
          throw InputError(fmt::format("{}: weight_map of '{}' names {}, which is not a file of the model directory",
                                       index.string(), it.key(), it.value().dump()));
        file_of[it.key()] = dir / shard;
      }
    }
    std::map<std::filesystem::path, std::unique_ptr<SafetensorsFile>> open_files;
    auto file_for = [&](const std::string& name) -> const SafetensorsFile& {
      auto mapped = file_of.find(name);
      // With an index, a tensor it does not map is the index's omission, not model.safetensors'.
      if (mapped == file_of.end() && indexed)
        throw InputError(fmt::format("{}: weight_map maps no file for '{}', which the model needs", index.string(),
                                     name));
      const std::filesystem::path p = mapped != file_of.end() ? mapped->second : dir / "model.safetensors";
      auto& f = open_files[p];
      if (!f) f = std::make_unique<SafetensorsFile>(p);
      return *f;
    };
    const ShardLayout& layout = trainer.layout();
    std::int64_t tensors = 0;
    for (const auto& unit : units) tensors += static_cast<std::int64_t>(unit.params.size());
    ProgressMeter meter("loading model.init_from", tensors);
    for (int u = 0; u < layout.unit_count(); ++u) {
      const UnitShard& s = layout.unit(u);
      const UnitSpec& unit = units[static_cast<std::size_t>(u)];
      // Alignment gaps and padding: 0; with LoRA the adapters as they are.
      std::vector<float> slice = unit.adapters_begin >= 0 && lora ? trainer.read_weights(u)
                                                                  : std::vector<float>(static_cast<std::size_t>(s.shard), 0.0f);
      for (const ParamSpec& p : unit.params) {
        meter.advance();
        if (lora && unit.trains(p, lora)) continue;   // an adapter: not the base's
        const ParamOverlap o = layout.overlap(u, p);
        const SafetensorsFile& f = file_for(p.name);
        const StTensor* t = f.find(p.name);
        if (!t) throw InputError(f.path().string() + ": no tensor '" + p.name + "', which the model needs");
        if (t->shape != p.shape)
          throw InputError(fmt::format("{}: tensor '{}': shape ({}), the model's is ({})", f.path().string(), p.name,
                                       fmt::join(t->shape, ", "), fmt::join(p.shape, ", ")));
        if (o.count == 0) continue;   // not in this rank's slice
        // Only this rank reads these elements: a failure here must reach the others through the
        // agreement below, not leave them waiting in it.
        std::vector<float> values;
        try {
          values = f.read_f32(p.name, o.first, o.count);
        } catch (const std::exception& e) {
          if (problem.empty()) problem = e.what();
          continue;
        }
        if (problem.empty())
          for (std::size_t k = 0; k < values.size(); ++k)
            if (!std::isfinite(values[k])) {
              problem = fmt::format("{}: tensor '{}' holds {} at element {}: a model's weights are finite",
                                       f.path().string(), p.name, values[k], static_cast<std::uint64_t>(o.first) + k);
              break;
            }
        std::copy(values.begin(), values.end(), slice.begin() + o.at);
        read.push_back({tensor_key(p.name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end())),
                        static_cast<std::uint64_t>(o.first), static_cast<std::uint64_t>(o.count),
                        crc_of(values.data(), values.size())});
      }
      trainer.write_weights(u, slice);
    }
    // Tensors of the directory that the model has no parameter for (a rotary_emb.inv_freq buffer,
    // a head beside tied embeddings): not read, as transformers does not, and said, as it says.
    std::set<std::string> needed;
    for (const UnitSpec& unit : units)
      for (const ParamSpec& p : unit.params) needed.insert(p.name);
    if (indexed) {
      for (const auto& entry : file_of)
        if (needed.count(entry.first) == 0) unused.push_back(entry.first);
    } else {
      for (const StTensor& t : file_for("").header().tensors)   // model.safetensors
        if (needed.count(t.name) == 0) unused.push_back(t.name);
    }
  } catch (const std::exception& e) {
    if (problem.empty()) problem = e.what();
  }
  // Only the rank whose slice holds it sees such a problem: the lowest such rank's message goes to all.
  agree_on_error(comm, problem);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0 && !unused.empty())
    spdlog::warn("{}: {} tensor{} the model has no parameter for, not read: {}", dir.string(), unused.size(),
                 unused.size() == 1 ? "" : "s", fmt::join(unused, ", "));
  return base_checksum(gather_all_slices(comm, read), units, lora);
}

}  // namespace shardrl
