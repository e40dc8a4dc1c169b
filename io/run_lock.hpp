// The exclusive lock of a run directory, held by one process (rank 0) for a job's whole life:
// two jobs on one run directory would interleave their metrics and checkpoints. flock(2) on
// <dir>/.lock, so a killed job's lock goes with its process; the file holds the holder's host
// and pid for the message a second job gets.
#pragma once

#include <filesystem>
#include <string>

namespace shardrl {

class RunLock {
 public:
  // Creates `dir` if needed and locks it. InputError naming the directory and the holder (host
  // and pid) when another process holds the lock, or the system's reason when it cannot be taken.
  // A file system without flock (Lustre mounted without -o flock, some NFS) takes no lock: then
  // warning() says so and the job goes on unprotected.
  explicit RunLock(const std::filesystem::path& dir);
  const std::string& warning() const { return warning_; }
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
  std::string warning_;
};

}  // namespace shardrl
