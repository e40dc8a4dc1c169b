#include "io/checkpoint_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {
namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kLatestTmp = "latest.tmp";
constexpr const char* kPartialSuffix = ".partial";

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path, int err) {
  throw InputError(fmt::format("cannot {} '{}': {}", what, path.string(), std::strerror(err)));
}

std::string checkpoint_name(std::int64_t iteration) {
  SHARDRL_CHECK(iteration >= 0, fmt::format("a checkpoint's iteration is >= 0, got {}", iteration));
  return fmt::format("iter_{:08d}.h5", iteration);
}

// The iteration of "iter_<digits>.h5" (with `suffix` after it), or none.
std::optional<std::int64_t> parse_name(const std::string& name, const std::string& suffix) {
  const std::string head = "iter_", tail = ".h5" + suffix;
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return std::nullopt;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

void fsync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail("open", path, errno);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("flush to disk", path, err);
  }
  ::close(fd);
}

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw InputError(fmt::format("cannot rename '{}' to '{}': {}", from.string(), to.string(), std::strerror(errno)));
}

void write_and_fsync(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", path, errno);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail("write", path, err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("flush to disk", path, err);
  }
  if (::close(fd) != 0) fail("close", path, errno);
}

// What `latest` says, trimmed; none when there is no `latest`.
std::optional<std::string> read_latest_name(const std::filesystem::path& dir) {
  const std::filesystem::path latest = dir / kLatest;
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::symlink_status(latest, ec);
  if (st.type() == std::filesystem::file_type::not_found) return std::nullopt;
  if (ec) fail("inspect", latest, ec.value());   // unreadable is not missing
  // A regular file (through a link): opening a FIFO named `latest` blocked rank 0, and every
  // rank with it, for ever.
  if (!std::filesystem::is_regular_file(latest, ec))
    throw InputError(fmt::format("'{}' is not a regular file: it should hold a checkpoint file's name", latest.string()));
  std::ifstream in(latest, std::ios::binary);
  if (!in) fail("read", latest, errno);
  // A file name and a newline: whatever is beyond a few KiB is not one, and is never read whole.
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  const auto last = text.find_last_not_of(" \t\r\n");
  text.erase(last == std::string::npos ? 0 : last + 1);
  return text;
}

}  // namespace

std::filesystem::path checkpoint_partial_path(const std::filesystem::path& dir, std::int64_t iteration) {
  return dir / (checkpoint_name(iteration) + kPartialSuffix);
}

std::filesystem::path checkpoint_path(const std::filesystem::path& dir, std::int64_t iteration) {
  return dir / checkpoint_name(iteration);
}

void commit_checkpoint(const std::filesystem::path& dir, std::int64_t iteration) {
  const std::filesystem::path partial = checkpoint_partial_path(dir, iteration);
  const std::filesystem::path final_path = checkpoint_path(dir, iteration);
  fsync_path(partial, false);
  rename_path(partial, final_path);
  fsync_path(dir, true);   // the rename itself is durable
  const std::filesystem::path tmp = dir / kLatestTmp;
  write_and_fsync(tmp, final_path.filename().string() + "\n");
  rename_path(tmp, dir / kLatest);
  fsync_path(dir, true);
}

std::filesystem::path latest_checkpoint(const std::filesystem::path& dir) {
  const std::optional<std::string> name = read_latest_name(dir);
  if (!name) return {};
  const std::filesystem::path latest = dir / kLatest;
  if (name->empty()) throw InputError(fmt::format("'{}' is empty: it should name a checkpoint file", latest.string()));
  if (name->find('/') != std::string::npos || name->find('\n') != std::string::npos || *name == "." || *name == "..")
    throw InputError(
        fmt::format("'{}' holds '{}', which is not a checkpoint file name", latest.string(), excerpt(*name)));
  if (parse_name(*name, kPartialSuffix))
    throw InputError(fmt::format("'{}' names '{}', an uncommitted checkpoint (a save that did not finish): it is "
                                 "never loaded",
                                 latest.string(), *name));
  const std::filesystem::path target = dir / *name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(target, ec))
    throw InputError(fmt::format("'{}' names '{}', but '{}' does not exist", latest.string(), excerpt(*name),
                                 (dir / excerpt(*name)).string()));
  return target;
}

std::vector<std::filesystem::path> committed_checkpoints(const std::filesystem::path& dir) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  if (st.type() == std::filesystem::file_type::not_found) return {};   // no run yet
  if (ec) fail("inspect", dir, ec.value());   // unreadable is not empty: never start afresh over it
  if (!std::filesystem::is_directory(st))
    throw InputError(fmt::format("'{}' is not a directory: it is where the run's checkpoints go", dir.string()));
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (auto iteration = parse_name(it->path().filename().string(), "")) {
      std::error_code entry;   // a dangling link named like a checkpoint is no checkpoint
      if (it->is_regular_file(entry)) found.emplace_back(*iteration, it->path());
    }
  if (ec) throw InputError(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& [iteration, path] : found) out.push_back(std::move(path));
  return out;
}

std::vector<std::filesystem::path> committed_checkpoints_after(const std::filesystem::path& dir,
                                                               std::int64_t iteration) {
  std::vector<std::filesystem::path> later;
  for (std::filesystem::path& p : committed_checkpoints(dir))
    if (*parse_name(p.filename().string(), "") > iteration) later.push_back(std::move(p));
  return later;
}

std::size_t delete_checkpoints_after(const std::filesystem::path& dir, std::int64_t iteration) {
  const std::vector<std::filesystem::path> later = committed_checkpoints_after(dir, iteration);
  std::string latest_name;
  try {
    latest_name = read_latest_name(dir).value_or("");
  } catch (const InputError&) {   // a malformed `latest` names none of them
  }
  for (const std::filesystem::path& p : later) {
    if (p.filename().string() == latest_name) {
      const std::filesystem::path latest = dir / kLatest;
      if (::unlink(latest.c_str()) != 0 && errno != ENOENT) fail("delete", latest, errno);
    }
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) fail("delete", p, errno);
  }
  if (!later.empty()) fsync_path(dir, true);
  return later.size();
}

void apply_retention(const std::filesystem::path& dir, std::int64_t keep_last, std::int64_t keep_every) {
  SHARDRL_CHECK(keep_last >= 0 && keep_every >= 0,
                fmt::format("retention counts are >= 0, got keep_last {} keep_every {}", keep_last, keep_every));
  // What `latest` names is kept even if it is malformed or dangling (this is no place to fail).
  std::string protected_name;
  try {
    protected_name = read_latest_name(dir).value_or("");
  } catch (const InputError&) {
  }

  std::vector<std::pair<std::int64_t, std::filesystem::path>> committed;
  std::vector<std::filesystem::path> stale;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto iteration = parse_name(name, "")) {
      if (it->is_regular_file(ec)) committed.emplace_back(*iteration, it->path());
    } else if (parse_name(name, kPartialSuffix) || name == kLatestTmp) {
      stale.push_back(it->path());
    }
  }
  if (ec) throw InputError(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));

  std::sort(committed.begin(), committed.end());
  std::set<std::int64_t> keep;
  const std::size_t last = static_cast<std::size_t>(std::min<std::int64_t>(keep_last, std::int64_t(committed.size())));
  for (std::size_t i = committed.size() - last; i < committed.size(); ++i) keep.insert(committed[i].first);
  for (const auto& [iteration, path] : committed)
    if (keep_every > 0 && iteration % keep_every == 0) keep.insert(iteration);

  std::vector<std::filesystem::path> doomed = stale;
  for (const auto& [iteration, path] : committed)
    if (keep.count(iteration) == 0 && path.filename().string() != protected_name) doomed.push_back(path);
  for (const auto& path : doomed)
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail("delete", path, errno);
  if (!doomed.empty()) fsync_path(dir, true);
}

}  // namespace shardrl
