// Kokkos start-up with an explicit device id, across the Kokkos 3.4 and 4.x initialisation APIs.
#include "core/kokkos.hpp"

namespace shardrl {

KokkosRuntime::KokkosRuntime(int device_id) {
#if KOKKOS_VERSION >= 40000
  Kokkos::InitializationSettings settings;
  if (kDeviceIsGpu) settings.set_device_id(device_id);
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments args;
  args.device_id = kDeviceIsGpu ? device_id : -1;
  Kokkos::initialize(args);
#endif
}

KokkosRuntime::~KokkosRuntime() { Kokkos::finalize(); }

std::string execution_space_name() { return ExecSpace::name(); }

}  // namespace shardrl
