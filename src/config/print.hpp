// Rendering a resolved Config: a table for the start-of-job log and TOML for the run directory
// (the TOML reads back to the same Config).
#pragma once

#include <string>

#include "config/load.hpp"

namespace shardrl {

// One line per key: "  run.seed                          1234        (run.toml:4:8)".
std::string format_config_table(const LoadedConfig& loaded);

// Every key, defaults included, as a TOML document.
std::string to_toml(const Config& config);

}  // namespace shardrl
