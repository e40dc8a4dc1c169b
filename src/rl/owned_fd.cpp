#include "rl/owned_fd.hpp"

#include <fcntl.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "core/errno_message.hpp"
#include "core/error.hpp"

namespace shardrl {
namespace {

// dup2 onto 0, 1 or 2 keeps FD_CLOEXEC when the source already is that number (a parent started
// with closed stdio), which would close the child's stdio at exec: keep pipe ends above 2.
OwnedFd above_stdio(OwnedFd fd) {
  if (fd.get() > 2) return fd;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) throw InputError("reward command: fcntl(F_DUPFD_CLOEXEC): " + errno_message(errno));
  return OwnedFd(moved);
}

}  // namespace

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw InputError("reward command: pipe2: " + errno_message(errno));
  Pipe pipe{OwnedFd(fds[0]), OwnedFd(fds[1])};
  pipe.read_end = above_stdio(std::move(pipe.read_end));
  pipe.write_end = above_stdio(std::move(pipe.write_end));
  return pipe;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    throw InputError("reward command: fcntl(O_NONBLOCK): " + errno_message(errno));
}

}  // namespace shardrl
