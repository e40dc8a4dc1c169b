#include "io/text_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace shardrl {
namespace {
[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path) {
  throw InputError("cannot " + what + " '" + path.string() + "': " + std::strerror(errno));
}

// The same, once the temporary exists: it is removed (errno kept), so a failed write leaves
// nothing beside the file.
[[noreturn]] void fail_removing(const std::string& what, const std::filesystem::path& path,
                                const std::filesystem::path& partial) {
  const int err = errno;
  ::unlink(partial.c_str());
  errno = err;
  fail(what, path);
}
}  // namespace

void write_text_atomically(const std::filesystem::path& path, std::string_view text) {
  std::error_code ec;
  if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec)
      throw InputError("cannot create directory '" + path.parent_path().string() + "': " + ec.message());
  }
  const std::filesystem::path partial = path.string() + ".partial";
  int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", partial);
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail_removing("write", partial, partial);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail_removing("flush", partial, partial);
  }
  if (::close(fd) != 0) fail_removing("close", partial, partial);
  if (::rename(partial.c_str(), path.c_str()) != 0) fail_removing("rename into", path, partial);
}

}  // namespace shardrl
