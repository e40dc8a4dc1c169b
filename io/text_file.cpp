#include "io/text_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace shardrl {

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)), partial_(path_.string() + ".partial") {
  std::error_code ec;
  if (path_.has_parent_path()) {
    std::filesystem::create_directories(path_.parent_path(), ec);
    if (ec)
      throw InputError("cannot create directory '" + path_.parent_path().string() + "': " + ec.message());
  }
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError("cannot create '" + partial_.string() + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!partial_.empty()) ::unlink(partial_.c_str());
}

// Closes and removes the temporary (errno kept for the message), so a failed write leaves
// nothing beside the file.
void AtomicFile::fail(const char* what, const std::filesystem::path& named) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(partial_.c_str());
  partial_.clear();
  throw InputError(std::string("cannot ") + what + " '" + named.string() + "': " + std::strerror(err));
}

void AtomicFile::append(std::string_view bytes) {
  SHARDRL_CHECK(fd_ >= 0, "AtomicFile::append after commit or failure");
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", partial_);
    }
    done += static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  SHARDRL_CHECK(fd_ >= 0, "AtomicFile::commit twice or after a failure");
  if (::fsync(fd_) != 0) fail("flush", partial_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", partial_);
  if (::rename(partial_.c_str(), path_.c_str()) != 0) fail("rename into", path_);
  partial_.clear();
  // The rename durable too (a power loss could otherwise bring back the old file): the directory's
  // entry flushed. Best effort: the file is in place whatever this says.
  const std::filesystem::path parent = path_.has_parent_path() ? path_.parent_path() : std::filesystem::path(".");
  const int dir = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void write_text_atomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFile file(path);
  file.append(text);
  file.commit();
}

}  // namespace shardrl
