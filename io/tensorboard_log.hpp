// TensorBoard's view of a run: <run>/tensorboard/events.out.tfevents.<unix time>.<host>, one
// scalar per metrics.jsonl field per iteration (the step is the iteration) and the resolved
// config as a text summary at step 0, so `tensorboard --logdir <run>/tensorboard` shows the run
// live. The file is TensorFlow's record format (length, masked CRC-32C of the length, the
// serialized Event, masked CRC-32C of it) holding Event / Summary protobuf messages, written
// directly: a handful of fields, no Python and no protobuf runtime in the job. One writer per
// run (rank 0); every record is flushed when written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace shardrl {

using MetricsRecord = std::vector<std::pair<std::string, double>>;

class TensorBoardLog {
 public:
  // Starts a new event file in `dir` (created if absent) with the config text at step 0 and the
  // records of `history` (a resumed run's earlier iterations, as metrics.jsonl holds them after
  // it dropped those from first_iteration on), then removes the directory's other event files,
  // so the curves continue without a step twice. The new file is complete before the old ones go.
  TensorBoardLog(const std::filesystem::path& dir, const std::string& config_text,
                 const std::vector<MetricsRecord>& history);

  // One scalar per field but "iteration" (fields[0], the step) and "time" (kWallTime: the event's
  // wall time, now where absent); non-finite values (metrics.jsonl's null: not measured) are
  // left out. Flushed. A failed write is an InputError naming the file.
  void write(const MetricsRecord& fields);

  const std::filesystem::path& path() const { return path_; }

  // The field holding when the record was written (Unix seconds): a resumed run's earlier
  // iterations keep their own time on TensorBoard's wall-time axes.
  static constexpr const char* kWallTime = "time";

  // The tag of a metrics.jsonl field: timings ("*_s", not "*_per_s") under time/, evaluation
  // fields already under eval/, the rest as they are.
  static std::string tag_of(const std::string& field);

 private:
  void append(const std::string& event);
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace shardrl
