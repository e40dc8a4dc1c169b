// The builds that the configuration tests (test_config_*.cpp) load configs for.
#pragma once

#include "config/config.hpp"

namespace shardrl {

inline const BuildInfo kCpu{false};
inline const BuildInfo kGpu{true};

}  // namespace shardrl
