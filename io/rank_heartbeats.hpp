// Each rank's progress through the job's watched phases (every warm-up step, iteration and
// save), one small file per rank under <run>/.heartbeats/ on the run's shared file system: how
// many phases the rank has entered and the name of the last. When a phase overruns its deadline,
// the watchdog reads them all from its own thread (no MPI there) and names the ranks that never
// entered it: the ones the others are waiting for. A rank that entered the phase but then stopped
// (SIGSTOP, a dead node) shows by its file's age: a thread touches each file every second, so a
// file much older than the freshest one belongs to a rank that no longer runs. Diagnostics only:
// a file that cannot be written or read costs the message its detail, never the job.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace shardrl {

class RankHeartbeats {
 public:
  RankHeartbeats(const std::filesystem::path& run_dir, int rank, int world_size);
  ~RankHeartbeats();
  RankHeartbeats(const RankHeartbeats&) = delete;
  RankHeartbeats& operator=(const RankHeartbeats&) = delete;

  // This rank entered phase number `sequence`, called `what`.
  void enter(std::int64_t sequence, const std::string& what);
  // The ranks whose last phase comes before `sequence`, e.g. "rank 1 (last entered: iteration 4)",
  // and those that reached it but have shown no sign of life for `silent_s` seconds longer than
  // the freshest rank, e.g. "rank 1 (entered iteration 5, then no sign of life for 9 s: stopped or
  // dead)"; "" when every rank that left a file has reached it and lives.
  std::string behind(std::int64_t sequence, double silent_s = 3.0) const;

 private:
  std::filesystem::path dir_;
  int world_size_;
  int fd_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread pulse_;   // touches this rank's file every second
};

}  // namespace shardrl
