#include "io/rank_heartbeats.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <fstream>

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
}

RankHeartbeats::~RankHeartbeats() {
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

std::string RankHeartbeats::behind(std::int64_t sequence) const {
  std::string out;
  for (int r = 0; r < world_size_; ++r) {
    std::ifstream in(file_of(dir_, r));
    std::int64_t seen = -1;
    std::string what;
    if (!(in >> seen)) continue;   // no file: nothing known of that rank
    std::getline(in, what);
    const auto first = what.find_first_not_of(' '), last = what.find_last_not_of(' ');
    what = first == std::string::npos ? "" : what.substr(first, last - first + 1);
    if (seen < sequence) out += fmt::format("{}rank {} (last entered: {})", out.empty() ? "" : ", ", r, what);
  }
  return out;
}

}  // namespace shardrl
