// Logging through spdlog. Rank 0 logs at info level; the other ranks log only warnings and
// errors unless all ranks are asked to log. Colour only when stdout is a terminal.
#pragma once

#include <spdlog/spdlog.h>

namespace shardrl {

// Installs the process-wide logger. Safe to call again (e.g. once the rank is known).
void init_logging(int rank, bool all_ranks);

}  // namespace shardrl
