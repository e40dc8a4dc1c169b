#include "io/run_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "core/host_name.hpp"

namespace shardrl {
namespace {

// What the holder wrote: "host pid", at most a short line (the file is ours, but may be damaged).
std::string holder_of(int fd) {
  char text[128] = {0};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string s = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  s = s.substr(0, s.find('\n'));
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s.empty() ? "a process that wrote no name" : s;
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create the run directory '{}': {}", dir.string(), ec.message()));
  const std::filesystem::path path = dir / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(fmt::format("cannot open '{}': {}", path.string(), std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      warning_ = fmt::format("the file system of '{}' takes no locks ({}): nothing stops a second job on this run "
                             "directory",
                             dir.string(), std::strerror(err));
      return;
    }
    const std::string holder = err == EWOULDBLOCK ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw InputError(fmt::format("the run directory '{}' is in use by another job ({}): wait for it to end, or "
                                   "choose another run.name",
                                   dir.string(), holder));
    throw InputError(fmt::format("cannot lock '{}': {}", path.string(), std::strerror(err)));
  }
  const std::string me = fmt::format("{} pid {}\n", host_name(), ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw InputError(fmt::format("cannot write '{}': {}", path.string(), std::strerror(err)));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);   // closing the descriptor releases the lock
}

}  // namespace shardrl
