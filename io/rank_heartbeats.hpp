// Each rank's progress through the job's watched phases (every warm-up step, iteration and
// save), one small file per rank under <run>/.heartbeats/ on the run's shared file system: how
// many phases the rank has entered and the name of the last. When a phase overruns its deadline,
// the watchdog reads them all from its own thread (no MPI there) and names the ranks that never
// entered it: the ones the others are waiting for. Diagnostics only: a file that cannot be
// written or read costs the message its detail, never the job.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace shardrl {

class RankHeartbeats {
 public:
  RankHeartbeats(const std::filesystem::path& run_dir, int rank, int world_size);
  ~RankHeartbeats();
  RankHeartbeats(const RankHeartbeats&) = delete;
  RankHeartbeats& operator=(const RankHeartbeats&) = delete;

  // This rank entered phase number `sequence`, called `what`.
  void enter(std::int64_t sequence, const std::string& what);
  // The ranks whose last phase comes before `sequence`, e.g. "rank 1 (last entered: iteration 4)";
  // "" when every rank that left a file has reached it.
  std::string behind(std::int64_t sequence) const;

 private:
  std::filesystem::path dir_;
  int world_size_;
  int fd_ = -1;
};

}  // namespace shardrl
