// `shardrl inspect PATH [--verify]`: what a checkpoint holds (iteration, world size at save,
// model, every tensor with its dtype and shape, the resolved config), read with the same
// reader as resume; --verify recomputes every tensor's checksum (exit 2 if any fails).
#pragma once

#include "app/cli.hpp"

namespace shardrl {

int run_inspect(const InspectArgs& args);

}  // namespace shardrl
