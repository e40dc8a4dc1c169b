// Test main for single-process tests that need Kokkos (kernels, GEMMs): GoogleTest -> Kokkos
// (device 0) -> tests -> Kokkos finalize.
#include <gtest/gtest.h>

#include "core/kokkos.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  shardrl::KokkosRuntime kokkos(0);
  return RUN_ALL_TESTS();
}
