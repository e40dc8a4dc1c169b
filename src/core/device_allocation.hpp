// Device memory allocated outside Kokkos by another layer and handed to the code that places
// buffers in it: the phase arena takes the communicator's symmetric memory this way
// (Communicator::allocate_symmetric), so that collectives on its buffers can use the GPUs' copy
// engines. The owner frees it in its destructor.
#pragma once

#include <cstddef>

namespace shardrl {

class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  virtual ~DeviceAllocation() = default;
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  virtual char* data() const = 0;
  virtual std::size_t bytes() const = 0;
};

}  // namespace shardrl
