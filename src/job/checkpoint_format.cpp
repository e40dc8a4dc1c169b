#include "job/checkpoint_format.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {
namespace checkpoint_format {

bool is_tensor(const std::string& name) {
  for (const char* group : {kModel, kExpAvg, kExpAvgSq, kReference})
    if (name.rfind(group, 0) == 0 && name.size() > std::string(group).size()) return true;
  return false;
}

}  // namespace checkpoint_format

std::unique_ptr<ShardedFileReader> open_checkpoint(const std::filesystem::path& path, MPI_Comm comm) {
  namespace f = checkpoint_format;
  const std::string where = path.string();
  const std::string partial = ".partial";
  if (where.size() > partial.size() && where.compare(where.size() - partial.size(), partial.size(), partial) == 0)
    throw InputError(fmt::format("{}: an uncommitted checkpoint (a save that did not finish) is never loaded; use a "
                                 "committed iter_*.h5",
                                 where));
  auto in = std::make_unique<ShardedFileReader>(path, comm);
  if (!in->has(f::kFormatVersion))
    throw InputError(fmt::format("{}: not a shardrl checkpoint (no {})", where, f::kFormatVersion));
  const std::int64_t version = in->read_int64(f::kFormatVersion);
  if (version != f::kVersion)
    throw InputError(fmt::format("{}: checkpoint format version {} is not one this shardrl reads (it reads {})", where,
                                 version, f::kVersion));
  for (const char* name : {f::kShardrlVersion, f::kWorldSize, f::kIteration, f::kModelSummary, f::kConfig, f::kSeed,
                           f::kTask, f::kIterationsDone, f::kWarmupStepsDone, f::kOptimStep, f::kOptimSkipped})
    if (!in->has(name))
      throw InputError(fmt::format("{}: incomplete checkpoint: no {} (every checkpoint of format version {} has it)",
                                   where, name, f::kVersion));
  return in;
}

}  // namespace shardrl
