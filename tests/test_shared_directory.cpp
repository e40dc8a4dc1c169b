// Every rank sees the directory it writes into with the others (io/shared_directory.hpp, and the
// check of io/sharded_file.hpp's writer): a rank that sees another directory, or none, stops every
// rank with an error naming it, where before they all hung in the collective create of the first
// save. Run at np 1, 2 and 4; the last rank is the one that looks elsewhere.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/shared_directory.hpp"
#include "io/sharded_file.hpp"
#include "mpi_world.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

using test::world_rank;
using test::world_size;

// A directory of this test's own, the same path on every rank (rank 0's pid).
fs::path test_dir(const std::string& name) {
  int pid = world_rank() == 0 ? static_cast<int>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return fs::temp_directory_path() / fmt::format("shardrl_shared_dir_{}_{}", pid, name);
}

// The InputError's message, "" when none was thrown.
template <class Run>
std::string input_error_of(Run run) {
  try {
    run();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SharedDirectory, EveryRankSeeingItPassesAndLeavesNoProbe) {
  const fs::path dir = test_dir("seen");
  if (world_rank() == 0) fs::create_directories(dir);
  EXPECT_EQ(input_error_of([&] { require_shared_directory(dir, MPI_COMM_WORLD); }), "");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe file stayed";
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST(SharedDirectory, ARankSeeingAnotherDirectoryStopsEveryRankNamingIt) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // The last rank looks at a directory of its own under the same name elsewhere: as a relative
  // run.dir does where it starts in another working directory.
  const fs::path shared = test_dir("shared"), other = test_dir("other");
  const bool last = world_rank() == world_size() - 1;
  if (world_rank() == 0) fs::create_directories(shared);
  if (last) fs::create_directories(other);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  // The wait for a slow file system to show the probe 1 s, not the job's 10 (the test ran
  // alone on CI's two cores, idle, for 10 s at each rank count).
  const std::string message = input_error_of(
      [&] { require_shared_directory(last ? other : shared, MPI_COMM_WORLD, std::chrono::seconds(1)); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  const std::string expected = fmt::format("{}: rank {} of {} (on ", (last ? other : shared).string(),
                                           world_size() - 1, world_size());
  // Every rank throws the last rank's message (it names its own path).
  EXPECT_NE(message.find(fmt::format("rank {} of {} (on ", world_size() - 1, world_size())), std::string::npos)
      << message;
  EXPECT_NE(message.find("does not see the run directory rank 0 (on "), std::string::npos) << message;
  if (last) {
    EXPECT_EQ(message.substr(0, expected.size()), expected);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(world_rank() != 0 || fs::is_empty(shared)) << "the probe file stayed";
  if (world_rank() == 0) fs::remove_all(shared);
  if (last) fs::remove_all(other);
}

// The collective create of a checkpoint in a directory one rank does not have: an error on every
// rank naming the rank and the directory, not a hang.
TEST(SharedDirectory, AWriterWhoseDirectoryOneRankLacksStopsEveryRank) {
  const fs::path dir = test_dir("writer");
  const bool last = world_rank() == world_size() - 1;
  const fs::path missing = dir / "missing";
  if (world_rank() == 0) fs::create_directories(world_size() > 1 ? missing : dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  // At np > 1 rank 0 has the directory (rank 0's file system: on one host the last rank sees it
  // too, so it is pointed at another that no rank has); at np 1 the one rank lacks it.
  const fs::path path = (last ? dir / "absent" : missing) / "iter.h5.partial";
  const std::string message = input_error_of([&] { ShardedFileWriter writer(path, MPI_COMM_WORLD); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_EQ(message, fmt::format("{}: cannot create: rank {} of {} sees no directory {}: every rank must see it at "
                                 "this path",
                                 (dir / "absent" / "iter.h5.partial").string(), world_size() - 1, world_size(),
                                 (dir / "absent").string()))
      << "rank " << world_rank();
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace shardrl
