// Small host-side exchanges over MPI used at start-up and for agreeing on errors: strings to
// every rank, strings to rank 0 in rank order, and an any-rank flag. Every rank calls each of
// these in the same order (DESIGN.md invariant 6).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace shardrl {

// `text` on `root` is copied to every rank.
void broadcast_string(MPI_Comm comm, std::string& text, int root);

// Rank `root` receives every rank's `text`, index = rank; other ranks receive {}.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root);

// True on every rank when `flag` is true on any rank.
bool any_rank(MPI_Comm comm, bool flag);

}  // namespace shardrl
