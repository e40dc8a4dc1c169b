#include "io/shared_directory.hpp"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/host_name.hpp"
#include "mpi/host_exchange.hpp"

namespace shardrl {
namespace {

// One word (the token's first): a host whose name cannot be read is "unknown-host".
std::string read_all(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

}  // namespace

void require_shared_directory(const std::filesystem::path& dir, MPI_Comm comm, std::chrono::milliseconds wait) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  // A new name each time: no file system can answer from what it cached of an earlier probe.
  std::string token = fmt::format("{} {} {}", host_name(), ::getpid(),
                                  std::chrono::steady_clock::now().time_since_epoch().count());
  broadcast_string(comm, token, 0);   // rank 0's
  const std::string name = fmt::format(".rank-probe-{}", std::hash<std::string>{}(token));
  run_on_root(comm, 0, [&] {
    std::ofstream out(dir / name, std::ios::trunc);
    out << token;
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(dir / name, ignored);
      throw std::runtime_error(fmt::format("{}: cannot write the ranks' probe file {}", dir.string(), name));
    }
  });
  std::string problem;
  if (rank != 0) {
    // A shared file system may show a file another client wrote a moment late (NFS attribute
    // caching, a FUSE mount's stat cache): waited for only where it is not seen at once.
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (read_all(dir / name) != token && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (read_all(dir / name) != token)
      problem = fmt::format("{}: rank {} of {} (on {}) does not see the run directory rank 0 (on {}) created: every "
                            "rank must see it at this path (a file system shared by the nodes, and an absolute "
                            "run.dir where the ranks start in different directories)",
                            dir.string(), rank, ranks, host_name(), token.substr(0, token.find(' ')));
  }
  std::string agreed;
  try {
    agree_on_error(comm, problem);
  } catch (const InputError& e) {
    agreed = e.what();
  }
  run_on_root(comm, 0, [&] {
    std::error_code ignored;
    std::filesystem::remove(dir / name, ignored);
  });
  if (!agreed.empty()) throw InputError(agreed);
}

}  // namespace shardrl
