// The system's text for an errno value, thread-safe (std::strerror may return a buffer that
// another thread's call overwrites).
#pragma once

#include <string>
#include <system_error>

namespace shardrl {

inline std::string errno_message(int err) { return std::generic_category().message(err); }

}  // namespace shardrl
