#include "mpi/host_exchange.hpp"

#include <climits>

#include "mpi/mpi_check.hpp"

namespace shardrl {

void broadcast_string(MPI_Comm comm, std::string& text, int root) {
  int rank = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  unsigned long long size = text.size();
  SHARDRL_CHECK_MPI(MPI_Bcast(&size, 1, MPI_UNSIGNED_LONG_LONG, root, comm));
  if (rank != root) text.assign(size, '\0');
  // Chunked so that files larger than INT_MAX bytes still travel.
  const unsigned long long chunk = 1ull << 30;
  for (unsigned long long off = 0; off < size; off += chunk) {
    int n = static_cast<int>(std::min(chunk, size - off));
    SHARDRL_CHECK_MPI(MPI_Bcast(text.data() + off, n, MPI_CHAR, root, comm));
  }
}

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root) {
  return gather_strings(comm, text, root, static_cast<unsigned long long>(INT_MAX), 1ull << 30);
}

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text, int root,
                                        unsigned long long gatherv_below, unsigned long long piece) {
  int rank = 0, size = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm, &size));
  unsigned long long len = text.size();
  std::vector<unsigned long long> lens(rank == root ? size : 0);
  SHARDRL_CHECK_MPI(MPI_Gather(&len, 1, MPI_UNSIGNED_LONG_LONG, lens.data(), 1, MPI_UNSIGNED_LONG_LONG, root, comm));
  // One Gatherv where its int counts and displacements hold; else (a merged --trace of many ranks
  // passes 2 GiB) each rank's text sent to the root in pieces.
  int small = 1;
  if (rank == root) {
    unsigned long long total = 0;
    for (unsigned long long l : lens) total += l;
    small = total < gatherv_below ? 1 : 0;
  }
  SHARDRL_CHECK_MPI(MPI_Bcast(&small, 1, MPI_INT, root, comm));
  std::vector<std::string> out;
  if (small) {
    std::vector<int> counts(lens.size()), offsets(lens.size());
    int total = 0;
    for (std::size_t r = 0; r < lens.size(); ++r) {
      counts[r] = static_cast<int>(lens[r]);
      offsets[r] = total;
      total += counts[r];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    SHARDRL_CHECK_MPI(MPI_Gatherv(text.data(), static_cast<int>(len), MPI_CHAR, all.data(), counts.data(),
                                  offsets.data(), MPI_CHAR, root, comm));
    for (std::size_t r = 0; r < lens.size(); ++r) out.push_back(all.substr(offsets[r], counts[r]));
    return out;
  }
  const unsigned long long chunk = piece;
  if (rank != root) {
    for (unsigned long long off = 0; off < len; off += chunk)
      SHARDRL_CHECK_MPI(MPI_Send(text.data() + off, static_cast<int>(std::min(chunk, len - off)), MPI_CHAR, root, 0,
                                 comm));
    return out;
  }
  for (int r = 0; r < size; ++r) {
    if (r == root) {
      out.push_back(text);
      continue;
    }
    std::string part(lens[r], '\0');
    for (unsigned long long off = 0; off < lens[r]; off += chunk)
      SHARDRL_CHECK_MPI(MPI_Recv(part.data() + off, static_cast<int>(std::min(chunk, lens[r] - off)), MPI_CHAR, r, 0,
                                 comm, MPI_STATUS_IGNORE));
    out.push_back(std::move(part));
  }
  return out;
}

std::vector<std::string> exchange_bytes(MPI_Comm comm, const std::vector<std::string>& outgoing) {
  int size = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm, &size));
  SHARDRL_CHECK(static_cast<int>(outgoing.size()) == size, "exchange_bytes needs one message per rank");
  std::vector<int> send_counts(size), recv_counts(size), send_offsets(size), recv_offsets(size);
  std::string send;
  for (int d = 0; d < size; ++d) {
    // MPI's int counts and offsets: each message and their sum under 2 GiB.
    SHARDRL_CHECK(outgoing[d].size() < static_cast<std::size_t>(INT_MAX) - send.size(),
                  "exchange_bytes sends 2 GiB or more");
    send_offsets[d] = static_cast<int>(send.size());
    send_counts[d] = static_cast<int>(outgoing[d].size());
    send += outgoing[d];
  }
  SHARDRL_CHECK_MPI(MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, comm));
  long long total = 0;
  for (int s = 0; s < size; ++s) {
    recv_offsets[s] = static_cast<int>(total);
    total += recv_counts[s];
  }
  SHARDRL_CHECK(total < INT_MAX, "exchange_bytes receives 2 GiB or more");
  std::string recv(static_cast<std::size_t>(total), '\0');
  SHARDRL_CHECK_MPI(MPI_Alltoallv(send.data(), send_counts.data(), send_offsets.data(), MPI_CHAR, recv.data(),
                                  recv_counts.data(), recv_offsets.data(), MPI_CHAR, comm));
  std::vector<std::string> incoming;
  for (int s = 0; s < size; ++s) incoming.push_back(recv.substr(recv_offsets[s], recv_counts[s]));
  return incoming;
}

namespace {

// values[i] = op over the ranks of values[i], in place.
void reduce_in_place(MPI_Comm comm, std::vector<double>& values, MPI_Op op) {
  if (values.empty()) return;
  SHARDRL_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, op, comm));
}

}  // namespace

void sum_on_host(MPI_Comm comm, std::vector<double>& values) { reduce_in_place(comm, values, MPI_SUM); }

void max_on_host(MPI_Comm comm, std::vector<double>& values) { reduce_in_place(comm, values, MPI_MAX); }

double max_on_host(MPI_Comm comm, double value) {
  std::vector<double> one{value};
  reduce_in_place(comm, one, MPI_MAX);
  return one[0];
}

bool any_rank(MPI_Comm comm, bool flag) {
  int local = flag ? 1 : 0, global = 0;
  SHARDRL_CHECK_MPI(MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, comm));
  return global != 0;
}

void agree_on_error(MPI_Comm comm, const std::string& error) {
  int rank = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  int mine = error.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  SHARDRL_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return;
  std::string message = rank == first ? error : std::string();
  broadcast_string(comm, message, first);
  throw InputError(message);
}

}  // namespace shardrl
