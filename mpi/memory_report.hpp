// The memory ledger of every rank, summarised: bytes per category, min and max over ranks.
#pragma once

#include <mpi.h>

#include <string>

namespace shardrl {

// Collective over `comm`. On rank 0 a table of the ledger (one line per category, then the
// total and the peak); "" on other ranks.
std::string memory_report(MPI_Comm comm);

}  // namespace shardrl
