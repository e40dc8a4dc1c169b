#include "io/staged_directory.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace shardrl {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& what, const fs::path& path, const std::error_code& ec) {
  throw InputError("cannot " + what + " '" + path.string() + "': " + ec.message());
}

}  // namespace

StagedDirectory::StagedDirectory(const fs::path& dir) : dir_(dir), staging_(dir / kStagingName) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("create directory", dir_, ec);
  if (fs::exists(staging_, ec)) {
    fs::remove_all(staging_, ec);
    if (ec) fail("remove the staging folder left by an export that was stopped,", staging_, ec);
    stale_removed_ = true;
  }
  fs::create_directory(staging_, ec);
  if (ec) fail("create directory", staging_, ec);
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);   // best effort: a destructor reports nothing
}

void StagedDirectory::commit(const std::string& last) {
  SHARDRL_CHECK(!committed_, "StagedDirectory::commit twice");
  std::vector<fs::path> names;
  std::error_code ec;
  for (fs::directory_iterator it(staging_, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename());
  if (ec) fail("list", staging_, ec);
  // In name order (a reproducible sequence), the file loaders open first at the end.
  std::sort(names.begin(), names.end());
  std::stable_partition(names.begin(), names.end(), [&](const fs::path& name) { return name != last; });
  for (const fs::path& name : names) {
    fs::rename(staging_ / name, dir_ / name, ec);
    if (ec) fail("move the exported file into", dir_ / name, ec);
  }
  // The renames durable (a power loss could otherwise bring back the old files). Best effort: the
  // files are in place whatever this says.
  if (const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  committed_ = true;
  fs::remove_all(staging_, ec);
  if (ec) fail("remove the emptied staging folder", staging_, ec);
}

}  // namespace shardrl
