// Counts allocations in the device memory space (MemSpace: CUDA memory on GPU builds, host
// memory on CPU builds) through Kokkos' tools interface, for tests of "nothing is allocated once
// a phase has run": a captured CUDA graph replays fixed addresses (DESIGN.md invariant 3), and a
// re-entered phase must not grow. Kokkos calls back with a plain function pointer, hence the
// process-wide counts. One counter at a time.
//
// Zero-byte records are not counted: Kokkos' CUDA backend reports a "TeamScratchMemory"
// allocation of 0 B at every team launch that needs no global scratch (its resize of an empty
// pool calls cudaMalloc(0), which returns no memory), while a launch that does need scratch
// reports its real size and is counted.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/kokkos.hpp"

namespace shardrl::test {

class DeviceAllocationCounter {
 public:
  DeviceAllocationCounter() {
    names().clear();
    Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
  }
  ~DeviceAllocationCounter() { Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr); }
  DeviceAllocationCounter(const DeviceAllocationCounter&) = delete;
  DeviceAllocationCounter& operator=(const DeviceAllocationCounter&) = delete;

  void reset() { names().clear(); }
  std::size_t count() const { return names().size(); }
  // The first few allocations' labels and sizes, for a failure message.
  std::string describe(std::size_t at_most = 8) const {
    std::string s;
    for (std::size_t i = 0; i < names().size() && i < at_most; ++i) s += (i ? ", " : "") + names()[i];
    return s;
  }

 private:
  static std::vector<std::string>& names() {
    static std::vector<std::string> n;
    return n;
  }
  static void on_allocate(const Kokkos::Profiling::SpaceHandle space, const char* label, const void*,
                          std::uint64_t size) {
    if (size > 0 && std::strcmp(space.name, MemSpace::name()) == 0)
      names().push_back(std::string(label) + " (" + std::to_string(size) + " B)");
  }
};

}  // namespace shardrl::test
