// File descriptors with one owner each, and close-on-exec pipes whose ends stay above stdio:
// what the reward command (rl/reward_command.cpp) hands a child process. Host-only.
#pragma once

#include <unistd.h>

#include <utility>

namespace shardrl {

// One owner per file descriptor.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { reset(); }

  int get() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  OwnedFd read_end, write_end;
};

// Both ends close on exec: the child gets only the ends dup2'ed onto its stdio. Throws
// InputError naming the failed call.
Pipe make_pipe();
void set_nonblocking(int fd);

}  // namespace shardrl
