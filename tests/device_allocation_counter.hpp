// Counts allocations in the device memory space (MemSpace: CUDA memory on GPU builds, host
// memory on CPU builds) through Kokkos' tools interface, for tests of "nothing is allocated once
// a phase has run": a captured CUDA graph replays fixed addresses (DESIGN.md invariant 3), and a
// re-entered phase must not grow. It also follows each allocation to its release, so a test can
// compare the device bytes alive with the memory ledger's total (every device allocation goes
// through the ledger). Kokkos calls back with a plain function pointer, hence the process-wide
// counts. One counter at a time.
//
// Zero-byte records are not counted: Kokkos' CUDA backend reports a "TeamScratchMemory"
// allocation of 0 B at every team launch that needs no global scratch (its resize of an empty
// pool calls cudaMalloc(0), which returns no memory), while a launch that does need scratch
// reports its real size and is counted.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/kokkos.hpp"

namespace shardrl::test {

class DeviceAllocationCounter {
 public:
  DeviceAllocationCounter() {
    names().clear();
    live().clear();
    Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(&on_deallocate);
  }
  ~DeviceAllocationCounter() {
    Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(nullptr);
  }
  DeviceAllocationCounter(const DeviceAllocationCounter&) = delete;
  DeviceAllocationCounter& operator=(const DeviceAllocationCounter&) = delete;

  void reset() { names().clear(); }
  std::size_t count() const { return names().size(); }
  // Bytes allocated since construction and not yet released (Kokkos' own scratch aside), and those
  // allocations by label.
  std::int64_t live_bytes() const {
    std::int64_t total = 0;
    for (const auto& [address, a] : live()) total += a.second;
    return total;
  }
  std::string describe_live() const {
    std::map<std::string, std::int64_t> by_label;
    for (const auto& [address, a] : live()) by_label[a.first] += a.second;
    std::string s;
    for (const auto& [label, bytes] : by_label) s += (s.empty() ? "" : ", ") + label + " " + std::to_string(bytes) + " B";
    return s;
  }
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
  static std::map<const void*, std::pair<std::string, std::int64_t>>& live() {
    static std::map<const void*, std::pair<std::string, std::int64_t>> l;
    return l;
  }
  static void on_allocate(const Kokkos::Profiling::SpaceHandle space, const char* label, const void* ptr,
                          std::uint64_t size) {
    if (size > 0 && std::strcmp(space.name, MemSpace::name()) == 0) {
      names().push_back(std::string(label) + " (" + std::to_string(size) + " B)");
      // Kokkos' own scratch ("Kokkos::Serial::scratch_mem", ...) belongs to the runtime, not the job.
      if (std::strncmp(label, "Kokkos::", 8) != 0) live()[ptr] = {label, static_cast<std::int64_t>(size)};
    }
  }
  static void on_deallocate(const Kokkos::Profiling::SpaceHandle space, const char*, const void* ptr, std::uint64_t) {
    if (std::strcmp(space.name, MemSpace::name()) == 0) live().erase(ptr);
  }
};

}  // namespace shardrl::test
