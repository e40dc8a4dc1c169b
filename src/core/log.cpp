#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace shardrl {

void init_logging(int rank, bool all_ranks) {
  // Colour only on a real terminal. Under mpirun or srun every rank's stdout is a pipe or a
  // pseudo-terminal of the launcher, whose own output usually goes to a file: no colour there.
  bool launched = std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("PMIX_RANK") ||
                  std::getenv("SLURM_PROCID");
  bool colour = !launched && !std::getenv("NO_COLOR") && isatty(STDOUT_FILENO);
  auto sink = std::make_shared<spdlog::sinks::stdout_color_sink_mt>(
      colour ? spdlog::color_mode::always : spdlog::color_mode::never);
  auto logger = std::make_shared<spdlog::logger>("shardrl", sink);
  std::string prefix = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "";
  logger->set_pattern("[%H:%M:%S.%e] %^%l%$ " + prefix + "%v");
  logger->set_level((rank <= 0 || all_ranks) ? spdlog::level::info : spdlog::level::warn);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace shardrl
