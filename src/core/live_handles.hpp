// How many handles of each kind (communicators, streams, events) are open in this
// process. An owner holds a HandleCount member, so the count is right by construction; the
// re-entrancy test proves that rollout and train open nothing new after their first call.
#pragma once

#include <cstdint>

namespace shardrl {

enum class HandleKind { communicator, stream, event };
inline constexpr int kHandleKinds = 3;

std::int64_t live_handles(HandleKind kind);

// Counts its owner as one open handle of `kind` while it lives.
class HandleCount {
 public:
  explicit HandleCount(HandleKind kind);
  ~HandleCount();
  HandleCount(const HandleCount&) = delete;
  HandleCount& operator=(const HandleCount&) = delete;

 private:
  HandleKind kind_;
};

}  // namespace shardrl
