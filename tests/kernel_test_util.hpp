// Helpers for kernel tests: seeded random device buffers, poisoning (so an element a kernel
// forgot to write fails the comparison), copies to host as double, and comparison against an
// fp64 host reference with a stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::test {

// The execution space's CUDA stream, for the CUDA-only kernels' launchers (null on CPU builds,
// whose tests of them skip).
inline void* stream_of([[maybe_unused]] const ExecSpace& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  return space.cuda_stream();
#else
  return nullptr;
#endif
}

// Host ints (positions, slots, block tables) as a device view of int32.
template <class Int>
Kokkos::View<std::int32_t*, MemSpace> device_ints(const std::vector<Int>& v) {
  Kokkos::View<std::int32_t*, MemSpace> d("ints", v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = static_cast<std::int32_t>(v[i]);
  Kokkos::deep_copy(d, h);
  return d;
}

// A device buffer of n elements of T with a host mirror.
template <class T>
struct Buffer {
  DeviceView<T> device;
  explicit Buffer(long n, const std::string& name = "buf") : device(name, static_cast<std::size_t>(n)) {}
  T* data() const { return device.data(); }
  long size() const { return static_cast<long>(device.extent(0)); }

  // Values from `values`, rounded to T.
  void set(const std::vector<double>& values) {
    auto h = Kokkos::create_mirror_view(device);
    for (long i = 0; i < size(); ++i) h(i) = T(static_cast<float>(values[i]));
    Kokkos::deep_copy(device, h);
  }
  // Every element NaN: what a kernel does not write stays NaN and fails any comparison.
  void poison() { set(std::vector<double>(size(), std::numeric_limits<double>::quiet_NaN())); }
  std::vector<double> host() const {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), device);
    std::vector<double> out(size());
    for (long i = 0; i < size(); ++i) out[i] = static_cast<float>(h(i));
    return out;
  }
};

// Uniform values in [lo, hi), rounded to T so the reference sees exactly the kernel's inputs.
template <class T>
std::vector<double> random_values(long n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<float>(T(static_cast<float>(dist(gen))));
  return v;
}

template <class T>
Buffer<T> random_buffer(long n, std::uint64_t seed, std::vector<double>* values = nullptr, double lo = -1.0,
                        double hi = 1.0) {
  Buffer<T> b(n);
  std::vector<double> v = random_values<T>(n, seed, lo, hi);
  b.set(v);
  if (values) *values = v;
  return b;
}

// Unit roundoff of T: tolerances are stated as multiples of it.
template <class T>
constexpr double unit_roundoff() {
  return std::is_same_v<T, bf16> ? 1.0 / 256 : 1.0 / (1 << 24);
}

// |got - want| <= atol + rtol * |want| for every element; reports the worst element.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                         double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  long worst = -1;
  double worst_excess = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    double allowed = atol + rtol * std::fabs(want[i]);
    if (!(err <= allowed)) {   // NaN fails too
      double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - allowed;
      if (worst < 0 || excess > worst_excess) {
        worst = static_cast<long>(i);
        worst_excess = excess;
      }
    }
  }
  if (worst >= 0)
    ADD_FAILURE() << what << ": element " << worst << " is " << got[worst] << ", reference " << want[worst]
                  << " (rtol " << rtol << ", atol " << atol << ")";
}

// n elements from a device pointer (which may be offset into a buffer), on the host as stored.
template <class T>
std::vector<T> device_elements(const T* p, long n) {
  Kokkos::View<const T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> d(p, static_cast<std::size_t>(n));
  HostView<T> h("device_elements", static_cast<std::size_t>(n));
  Kokkos::deep_copy(h, d);
  return std::vector<T>(h.data(), h.data() + n);
}

// Every element of got has the bits of want: a packed kernel against its one-element form, where
// the arithmetic per element is the same. Reports the first differing element and how many differ.
template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  long first = -1, differing = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (first < 0) first = static_cast<long>(i);
      ++differing;
    }
  if (first >= 0)
    ADD_FAILURE() << what << ": " << differing << " of " << got.size() << " elements differ in their bits, the first "
                  << first << ": " << static_cast<float>(got[first]) << " instead of "
                  << static_cast<float>(want[first]);
}
template <class T>
void expect_same_bits(const T* got, const T* want, long n, const std::string& what) {
  expect_same_bits(device_elements(got, n), device_elements(want, n), what);
}

// Guard elements past a kernel's range stay poisoned, so an out-of-range write is caught too.
constexpr long kGuard = 16;

inline void expect_guard_untouched(const std::vector<double>& got, long n, const char* what) {
  for (long i = n; i < static_cast<long>(got.size()); ++i)
    EXPECT_TRUE(std::isnan(got[i])) << what << ": guard element " << i - n << " was written";
}

// A buffer of offset + values.size() + kGuard elements holding values from element `offset` on,
// NaN elsewhere. Offset 1 moves the kernel's range off the 16-byte alignment of the allocation,
// so a packed kernel must take its one-element path.
template <class T>
Buffer<T> buffer_at(long offset, const std::vector<double>& values) {
  std::vector<double> all(offset + values.size() + kGuard, std::numeric_limits<double>::quiet_NaN());
  std::copy(values.begin(), values.end(), all.begin() + offset);
  Buffer<T> b(static_cast<long>(all.size()));
  b.set(all);
  return b;
}

// A buffer for a kernel to write n elements into from element `offset` on, NaN throughout.
template <class T>
Buffer<T> poisoned_at(long offset, long n) {
  Buffer<T> b(offset + n + kGuard);
  b.poison();
  return b;
}

// Elements before `offset` and from offset + n on were not written (they are NaN).
inline void expect_untouched_outside(const std::vector<double>& got, long offset, long n, const std::string& what) {
  for (long i = 0; i < static_cast<long>(got.size()); ++i) {
    if (i >= offset && i < offset + n) continue;
    EXPECT_TRUE(std::isnan(got[i])) << what << ": element " << i - offset << " outside the range was written";
  }
}

}  // namespace shardrl::test
