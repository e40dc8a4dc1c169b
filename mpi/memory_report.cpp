#include "mpi/memory_report.hpp"

#include <fmt/format.h>

#include <array>

#include "core/memory_ledger.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

std::string memory_report(MPI_Comm comm) {
  const MemoryLedger& ledger = MemoryLedger::instance();
  constexpr int kRows = kMemoryCategories + 2;   // categories, total, peak
  std::array<long long, kRows> mine{}, lo{}, hi{};
  for (int c = 0; c < kMemoryCategories; ++c) mine[c] = ledger.bytes(static_cast<MemoryCategory>(c));
  mine[kMemoryCategories] = ledger.total();
  mine[kMemoryCategories + 1] = ledger.peak();
  SHARDRL_CHECK_MPI(MPI_Reduce(mine.data(), lo.data(), kRows, MPI_LONG_LONG, MPI_MIN, 0, comm));
  SHARDRL_CHECK_MPI(MPI_Reduce(mine.data(), hi.data(), kRows, MPI_LONG_LONG, MPI_MAX, 0, comm));
  int rank = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  if (rank != 0) return "";
  auto mib = [](long long b) { return b / double(1 << 20); };
  std::string out = fmt::format("memory per rank (MiB)    {:>10} {:>10}\n", "min", "max");
  for (int r = 0; r < kRows; ++r) {
    const char* name = r < kMemoryCategories ? category_name(static_cast<MemoryCategory>(r))
                                             : (r == kMemoryCategories ? "total" : "peak");
    out += fmt::format("  {:<22} {:>10.2f} {:>10.2f}\n", name, mib(lo[r]), mib(hi[r]));
  }
  return out;
}

}  // namespace shardrl
