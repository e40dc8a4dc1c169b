// Test main for MPI tests (after Cabana's harness): MPI -> GoogleTest -> Kokkos -> tests ->
// Kokkos finalize -> MPI finalize. Every rank runs every test; ranks other than 0 print only
// their failures; all ranks exit with the worst result of any rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "core/log.hpp"
#include "mpi/device.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"

namespace {
bool only_listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--gtest_list_tests", 0) == 0) return true;
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;   // as the job's session: asynchronous checkpoint saves write from a thread
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  shardrl::install_mpi_error_handling();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    // Failures on other ranks still reach stderr through GoogleTest's failure reporter below.
    struct FailurePrinter : ::testing::EmptyTestEventListener {
      int rank;
      explicit FailurePrinter(int r) : rank(r) {}
      void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (r.failed())
          std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank, r.file_name() ? r.file_name() : "?",
                       r.line_number(), r.summary());
      }
    };
    listeners.Append(new FailurePrinter(rank));
  }
  shardrl::init_logging(rank, false);
  int result = 0;
  {
    // One GPU per node-local rank, as in the job (on CPU builds: no device).
    shardrl::DeviceBinding device;
    {
      shardrl::ProcessLayout layout = shardrl::ProcessLayout::discover(MPI_COMM_WORLD);
      try {
        device = shardrl::bind_device(layout);
      } catch (const shardrl::InputError& e) {
        if (rank == 0) std::fprintf(stderr, "cannot run this test here: %s\n", e.what());
        MPI_Finalize();
        return 1;
      }
    }
    shardrl::KokkosRuntime kokkos(device.device_id);
    if (only_listing(argc, argv)) {
      if (rank == 0) result = RUN_ALL_TESTS();
    } else {
      result = RUN_ALL_TESTS();
    }
  }
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
