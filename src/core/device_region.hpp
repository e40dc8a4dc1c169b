// A device buffer as raw bytes: what a captured graph reads that the host fills before a launch.
#pragma once

#include <cstddef>

namespace shardrl {

struct DeviceRegion {
  void* data = nullptr;
  std::size_t bytes = 0;
};

}  // namespace shardrl
