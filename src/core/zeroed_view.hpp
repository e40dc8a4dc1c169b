// A device allocation that starts all zeros, as every Kokkos allocation does, made cheaply on
// host builds: Kokkos 3.4 zeroes a host view in a loop over its elements, touching every page,
// where most of a large buffer (a text job's logits rows) may never be touched at all.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "core/kokkos.hpp"
#include "core/zero_host_pages.hpp"

namespace shardrl {

// T is plain data whose default value is all zero bytes (numbers, and bf16's `bits = 0`), so
// skipping its constructors for zero bytes changes nothing.
template <class T>
DeviceView<T> zeroed_view(const std::string& label, std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "zero bytes are a value only of plain data");
  if constexpr (kDeviceIsGpu) {
    return DeviceView<T>(label, n);
  } else {
    DeviceView<T> view(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
    zero_host_pages(reinterpret_cast<char*>(view.data()), n * sizeof(T));
    return view;
  }
}

}  // namespace shardrl
