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

// Whether `name` is a per-parameter tensor of one of the groups above.
bool is_tensor(const std::string& name);

}  // namespace checkpoint_format

// Collective. Opens `path` as a job checkpoint. InputError naming the file when it is an
// uncommitted `.partial` file, cannot be opened, is not a shardrl checkpoint (no format version),
// has a format version this build does not read, or lacks any of the scalars and strings every
// checkpoint holds.
std::unique_ptr<ShardedFileReader> open_checkpoint(const std::filesystem::path& path, MPI_Comm comm);

}  // namespace shardrl
