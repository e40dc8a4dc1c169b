#include "app/job_config.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "mpi/host_exchange.hpp"

namespace shardrl {

LoadedConfig read_job_config(MPI_Comm world, const TrainArgs& args, int world_size) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::string text, read_error;
  if (rank == 0) {
    std::ifstream in(args.config_path, std::ios::binary);
    if (!in) {
      read_error = fmt::format("cannot read config file '{}': {}", args.config_path, std::strerror(errno));
    } else {
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
  }
  broadcast_string(world, read_error, 0);
  if (!read_error.empty()) {
    LoadedConfig failed;
    failed.errors.push_back(read_error);
    return failed;
  }
  broadcast_string(world, text, 0);
  return parse_job_config(text, args.config_path, args.overrides, world_size);
}

LoadedConfig parse_job_config(const std::string& text, const std::string& source,
                              const std::vector<std::string>& overrides, int world_size) {
  LoadedConfig loaded = load_config(text, source, overrides, this_build());
  if (loaded.ok())
    for (auto& e : check_for_job(loaded, world_size)) loaded.errors.push_back(std::move(e));
  return loaded;
}

void report_config_errors(const LoadedConfig& loaded, int rank) {
  if (rank != 0) return;
  std::string msg = fmt::format("shardrl: invalid configuration ({} problem{}):\n", loaded.errors.size(),
                                loaded.errors.size() == 1 ? "" : "s");
  for (const auto& e : loaded.errors) msg += "  " + e + "\n";
  std::cerr << msg << std::flush;
}

}  // namespace shardrl
