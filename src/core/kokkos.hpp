// Kokkos aliases used across shardrl, and the one place that knows which backend is compiled.
// Only the API common to Kokkos 3.4 (Debian, Serial) and 4.x (CUDA) is used.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

namespace shardrl {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;

template <class T>
using DeviceView = Kokkos::View<T*, MemSpace>;
template <class T>
using HostView = Kokkos::View<T*, HostSpace>;

// Host memory that the device copies into at the link's full speed: page-locked in CUDA builds.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedHostSpace = Kokkos::CudaHostPinnedSpace;
#else
using PinnedHostSpace = Kokkos::HostSpace;
#endif

// True when tensors live in GPU memory (the CUDA build).
inline constexpr bool kDeviceIsGpu =
#if defined(KOKKOS_ENABLE_CUDA)
    true;
#else
    false;
#endif

// Initialises Kokkos for this process and binds it to `device_id` (ignored without a GPU).
// Finalizes on destruction. Constructed after the MPI session and destroyed before it.
class KokkosRuntime {
 public:
  explicit KokkosRuntime(int device_id);
  ~KokkosRuntime();
  KokkosRuntime(const KokkosRuntime&) = delete;
  KokkosRuntime& operator=(const KokkosRuntime&) = delete;
};

// "Serial", "OpenMP", "Cuda", ... of the default execution space.
std::string execution_space_name();

}  // namespace shardrl
