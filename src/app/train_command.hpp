// `shardrl train`: the job. Until the RL loop exists it is a smoke run of the runtime.
#pragma once

#include "app/cli.hpp"

namespace shardrl {

int run_train(const TrainArgs& args);

}  // namespace shardrl
