#include "core/live_handles.hpp"

#include <array>
#include <atomic>

namespace shardrl {
namespace {
std::array<std::atomic<std::int64_t>, kHandleKinds>& counts() {
  static std::array<std::atomic<std::int64_t>, kHandleKinds> c{};
  return c;
}
}  // namespace

std::int64_t live_handles(HandleKind kind) { return counts()[static_cast<int>(kind)].load(); }

HandleCount::HandleCount(HandleKind kind) : kind_(kind) { ++counts()[static_cast<int>(kind_)]; }
HandleCount::~HandleCount() { --counts()[static_cast<int>(kind_)]; }

}  // namespace shardrl
