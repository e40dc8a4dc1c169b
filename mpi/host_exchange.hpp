// Small host-side exchanges over MPI used at start-up and for agreeing on errors: strings to
// every rank, strings to rank 0 in rank order, and an any-rank flag. Every rank calls each of
// these in the same order (DESIGN.md invariant 6).
#pragma once

#include <mpi.h>

#include <exception>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace shardrl {

// `text` on `root` is copied to every rank.
void broadcast_string(MPI_Comm comm, std::string& text, int root);

// Rank `root` receives every rank's `text`, index = rank; other ranks receive {}.
// Sizes are 64-bit: past 2 GiB in all (a merged --trace of many ranks) the texts travel to the
// root point to point, in pieces.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root);
// The same with the bounds as parameters (tests: the point-to-point path on small texts): one
// Gatherv where the total is below `gatherv_below`, else pieces of at most `piece` bytes.
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root,
                                        unsigned long long gatherv_below, unsigned long long piece);

// outgoing[d] (one entry per rank) is delivered to rank d; returns what each rank s sent here,
// index = s. Each message must be under 2 GiB. Collective.
std::vector<std::string> exchange_bytes(MPI_Comm comm, const std::vector<std::string>& outgoing);

// values[i] becomes the sum of values[i] over the ranks (fp64, on the host). Collective.
void sum_on_host(MPI_Comm comm, std::vector<double>& values);

// The largest `value` over the ranks. Collective.
double max_on_host(MPI_Comm comm, double value);
// values[i] becomes the largest values[i] over the ranks. Collective.
void max_on_host(MPI_Comm comm, std::vector<double>& values);

// True on every rank when `flag` is true on any rank.
bool any_rank(MPI_Comm comm, bool flag);

// If any rank has a non-empty `error`, every rank throws InputError with the message of the
// lowest such rank (DESIGN.md invariant 6): a problem one rank sees (its file, its memory)
// stops them all with its cause. Collective.
void agree_on_error(MPI_Comm comm, const std::string& error);

// A section every rank runs on its own (reading its files, scoring its rows), ended by an
// agreement: an InputError on any rank becomes the same InputError, with the lowest such rank's
// message, on every rank. Collective.
template <class Section>
void run_on_every_rank(MPI_Comm comm, Section&& section) {
  std::string problem;
  try {
    section();
  } catch (const InputError& e) {
    problem = e.what();
  }
  agree_on_error(comm, problem);
}

// A section only `root` runs (directory creation, a commit, `latest`, retention, the metrics
// log, run files), ended by an agreement: an exception there (InputError, a filesystem_error,
// any std::exception) becomes an InputError with root's message on every rank, so no rank goes
// on into a collective that root will never enter and every rank stops within seconds with the
// cause. Collective.
template <class Section>
void run_on_root(MPI_Comm comm, int root, Section&& section) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string problem;
  if (rank == root) {
    try {
      section();
    } catch (const std::exception& e) {
      problem = e.what();
      if (problem.empty()) problem = "an error without a message";
    }
  }
  broadcast_string(comm, problem, root);
  if (!problem.empty()) throw InputError(problem);
}

}  // namespace shardrl
