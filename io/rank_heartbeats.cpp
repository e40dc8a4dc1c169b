#include "io/rank_heartbeats.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <vector>

namespace shardrl {
namespace {

std::filesystem::path file_of(const std::filesystem::path& dir, int rank) {
  return dir / fmt::format("rank_{}", rank);
}

}  // namespace

RankHeartbeats::RankHeartbeats(const std::filesystem::path& run_dir, int rank, int world_size)
    : dir_(run_dir / ".heartbeats"), world_size_(world_size) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);   // every rank: it may be the first there
  fd_ = ::open(file_of(dir_, rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  enter(0, "start-up");
  if (fd_ >= 0)
    pulse_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) ::futimens(fd_, nullptr);
    });
}

RankHeartbeats::~RankHeartbeats() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (pulse_.joinable()) pulse_.join();
  if (fd_ >= 0) ::close(fd_);
}

void RankHeartbeats::enter(std::int64_t sequence, const std::string& what) {
  if (fd_ < 0) return;
  // One line, padded to a fixed width so a shorter record leaves no tail of a longer one.
  std::string line = fmt::format("{} {}", sequence, what);
  line.resize(120, ' ');
  line += '\n';
  if (::pwrite(fd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    // Diagnostics only: the message will lack this rank's line.
  }
}

std::string RankHeartbeats::behind(std::int64_t sequence, double silent_s) const {
  struct Seen {
    std::int64_t sequence = -1;   // -1: no file, nothing known of that rank
    std::string what;
    double touched = 0;           // the file's modification time, seconds
  };
  std::vector<Seen> ranks(world_size_);
  double freshest = 0;
  for (int r = 0; r < world_size_; ++r) {
    const auto path = file_of(dir_, r);
    std::ifstream in(path);
    Seen& s = ranks[r];
    if (!(in >> s.sequence)) {
      s.sequence = -1;
      continue;
    }
    std::getline(in, s.what);
    const auto first = s.what.find_first_not_of(' '), last = s.what.find_last_not_of(' ');
    s.what = first == std::string::npos ? "" : s.what.substr(first, last - first + 1);
    struct stat st {};
    // Ages are compared between the files, all stamped by the same file system's clock.
    if (::stat(path.c_str(), &st) == 0) s.touched = double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec);
    freshest = std::max(freshest, s.touched);
  }
  std::string out;
  for (int r = 0; r < world_size_; ++r) {
    const Seen& s = ranks[r];
    if (s.sequence < 0) continue;
    const char* sep = out.empty() ? "" : ", ";
    if (s.sequence < sequence) out += fmt::format("{}rank {} (last entered: {})", sep, r, s.what);
    else if (s.touched > 0 && freshest - s.touched > silent_s)
      out += fmt::format("{}rank {} (entered {}, then no sign of life for {:.0f} s: stopped or dead)", sep, r, s.what,
                         freshest - s.touched);
  }
  return out;
}

}  // namespace shardrl
