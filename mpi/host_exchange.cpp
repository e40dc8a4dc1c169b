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
  int rank = 0, size = 0;
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm, &size));
  int len = static_cast<int>(text.size());
  std::vector<int> lens(rank == root ? size : 0), offsets(rank == root ? size : 0);
  SHARDRL_CHECK_MPI(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm));
  std::string all;
  if (rank == root) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[r] = total;
      total += lens[r];
    }
    all.resize(total);
  }
  SHARDRL_CHECK_MPI(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(),
                                offsets.data(), MPI_CHAR, root, comm));
  std::vector<std::string> out;
  for (int r = 0; r < static_cast<int>(lens.size()); ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
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
