#include "job/checkpoint_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "core/error.hpp"
#include "io/field_crc.hpp"

namespace shardrl {
namespace checkpoint_format {
namespace {

constexpr MetadataName kMetadata[] = {
    {kFormatVersion, false}, {kShardrlVersion, true},   {kWorldSize, false},       {kIteration, false},
    {kModelSummary, true},   {kConfig, true},           {kLoraBase, true},         {kLoraBaseChecksum, false},
    {kSeed, false},          {kRngScheme, true},        {kTask, true},             {kTaskChecksum, false},
    {kIterationsDone, false}, {kWarmupStepsDone, false}, {kOptimStep, false},      {kOptimSkipped, false},
    {kOptimScheduleStart, false}};

}  // namespace

std::vector<MetadataName> metadata_names() { return {std::begin(kMetadata), std::end(kMetadata)}; }

std::int64_t metadata_checksum(const std::vector<std::pair<std::string, MetadataValue>>& values) {
  // A value the list above lacks would go unchecked: a new scalar is added there too.
  for (const auto& v : values)
    SHARDRL_CHECK(std::any_of(std::begin(kMetadata), std::end(kMetadata), [&](const MetadataName& m) { return v.first == m.name; }),
                  fmt::format("checkpoint metadata {} is not among those its checksum covers", v.first));
  FieldCrc crc;
  for (const MetadataName& m : kMetadata) {
    const auto it = std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.first == m.name; });
    if (it == values.end()) continue;
    crc.add(std::string_view(m.name));
    if (const auto* s = std::get_if<std::string>(&it->second)) crc.add(std::string_view(*s));
    else crc.add(std::get<std::int64_t>(it->second));
  }
  return crc.value();
}

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
  // Each counter must be in its range and agree with the others (named one by one), and all of
  // them match the checksum the writer recorded (a value in range but not the one saved).
  auto bad = [&](const char* name, std::int64_t value, const std::string& rule) {
    return InputError(fmt::format("{}: {} = {} is not a value a checkpoint holds ({})", where, name, value, rule));
  };
  const std::int64_t world = in->read_int64(f::kWorldSize), iteration = in->read_int64(f::kIteration),
                     done = in->read_int64(f::kIterationsDone), warmup = in->read_int64(f::kWarmupStepsDone),
                     step = in->read_int64(f::kOptimStep), skipped = in->read_int64(f::kOptimSkipped);
  if (world < 1) throw bad(f::kWorldSize, world, ">= 1");
  if (iteration < 0) throw bad(f::kIteration, iteration, ">= 0");
  if (done != iteration) throw bad(f::kIterationsDone, done, fmt::format("{} = {}", f::kIteration, iteration));
  if (warmup < 0) throw bad(f::kWarmupStepsDone, warmup, ">= 0");
  if (step < 0) throw bad(f::kOptimStep, step, ">= 0");
  // (Skipped steps are not among the steps: a diverging run may skip more than it takes.)
  if (skipped < 0) throw bad(f::kOptimSkipped, skipped, ">= 0");
  if (in->has(f::kOptimScheduleStart)) {
    const std::int64_t start = in->read_int64(f::kOptimScheduleStart);
    if (start < 0 || start > step) throw bad(f::kOptimScheduleStart, start, fmt::format("0 .. {}", step));
  }
  if (in->has(f::kMetadataChecksum)) {
    std::vector<std::pair<std::string, f::MetadataValue>> values;
    for (const f::MetadataName& m : f::kMetadata)
      if (in->has(m.name))
        values.emplace_back(m.name, m.text ? f::MetadataValue(in->read_string(m.name)) : f::MetadataValue(in->read_int64(m.name)));
    const std::int64_t saved = in->read_int64(f::kMetadataChecksum), now = f::metadata_checksum(values);
    if (saved != now) {
      std::string names;
      for (const auto& v : values) names += (names.empty() ? "" : ", ") + v.first;
      throw InputError(fmt::format("{}: damaged checkpoint: its scalars and strings ({}) fail their checksum (recorded "
                                   "{:08x}, computed {:08x})",
                                   where, names, saved, now));
    }
  }
  return in;
}

}  // namespace shardrl
