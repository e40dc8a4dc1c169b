// The names inside a job checkpoint (docs/checkpoint-format.md), written down once: every
// reader and writer (train's save and resume, generate, convert, inspect) takes them from here,
// and every reader opens a file through open_checkpoint(), which checks the format version and
// that the metadata every checkpoint carries is there.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "io/sharded_file.hpp"

namespace shardrl {
namespace checkpoint_format {

inline constexpr std::int64_t kVersion = 1;

// Per-parameter tensor groups: the group followed by the parameter's Hugging Face name.
inline constexpr const char* kModel = "/model/";                 // fp32 main weights
inline constexpr const char* kExpAvg = "/optim/exp_avg/";        // Adam first moment
inline constexpr const char* kExpAvgSq = "/optim/exp_avg_sq/";   // Adam second moment
inline constexpr const char* kReference = "/reference/";         // the frozen KL reference (rl.kl_coef > 0)

// Scalars and strings.
inline constexpr const char* kFormatVersion = "/meta/format_version";
inline constexpr const char* kShardrlVersion = "/meta/shardrl_version";
inline constexpr const char* kWorldSize = "/meta/world_size";
inline constexpr const char* kIteration = "/meta/iteration";
inline constexpr const char* kModelSummary = "/meta/model";
inline constexpr const char* kConfig = "/meta/config";           // the resolved TOML of the saving job
// LoRA: which frozen base the adapters were trained over (the checkpoint holds only the adapters).
inline constexpr const char* kLoraBase = "/meta/lora_base";
// With LoRA over model.init_from: its tensors' checksum (job/hf_weights.hpp), what resume compares.
inline constexpr const char* kLoraBaseChecksum = "/meta/lora_base_checksum";
inline constexpr const char* kSeed = "/rng/seed";
inline constexpr const char* kRngScheme = "/rng/scheme";
inline constexpr const char* kTask = "/data/task";
// A dataset task's fingerprint (rl/task_checksum.hpp), what a resume compares: absent for a
// generated task, a checkpoint written without the RL loop (convert), and older checkpoints.
inline constexpr const char* kTaskChecksum = "/data/task_checksum";
inline constexpr const char* kIterationsDone = "/data/iterations_done";
inline constexpr const char* kWarmupStepsDone = "/data/warmup_steps_done";
inline constexpr const char* kOptimStep = "/optim/step";
inline constexpr const char* kOptimSkipped = "/optim/skipped";
// The steps before the learning-rate schedule's first (the supervised warm-up's): absent from
// checkpoints written before it existed, whose schedule ran from the first step.
inline constexpr const char* kOptimScheduleStart = "/optim/schedule_start";
// zlib's CRC-32 over the scalars and strings above that the file holds (metadata_checksum): the
// counters that place a resumed run (a flipped bit in /optim/step moves its learning rate) are
// checked as the tensors are. Absent from checkpoints written before it existed.
inline constexpr const char* kMetadataChecksum = "/meta/checksum";

// Every scalar and string a checkpoint may hold (all those above but the checksum), in the
// checksum's order; `text` for a string.
struct MetadataName {
  const char* name;
  bool text;
};
std::vector<MetadataName> metadata_names();

// A scalar or string of the file, by name.
using MetadataValue = std::variant<std::string, std::int64_t>;
// The checksum of `values` (any order; every name among the scalars and strings above, except the
// checksum itself): each name and value in the order of the names above, a name after its
// length, a value as its bytes (a string after its length, an int64 as 8 bytes little-endian).
std::int64_t metadata_checksum(const std::vector<std::pair<std::string, MetadataValue>>& values);

// Whether `name` is a per-parameter tensor of one of the groups above.
bool is_tensor(const std::string& name);

}  // namespace checkpoint_format

// Collective. Opens `path` as a job checkpoint. InputError naming the file when it is an
// uncommitted `.partial` file, cannot be opened, is not a shardrl checkpoint (no format version),
// has a format version this build does not read, lacks any of the scalars and strings every
// checkpoint holds, holds a counter out of its range, or fails its metadata checksum.
std::unique_ptr<ShardedFileReader> open_checkpoint(const std::filesystem::path& path, MPI_Comm comm);

}  // namespace shardrl
