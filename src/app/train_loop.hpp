// One iteration of the job until the RL loop exists: a sharded train step (micro-batches of
// the pattern workload, then the optimizer), and its progress line.
#pragma once

#include <chrono>

#include "app/pattern_batch.hpp"
#include "config/config.hpp"
#include "core/kokkos.hpp"
#include "core/watchdog.hpp"
#include "fsdp/sharded_trainer.hpp"

namespace shardrl {

class TrainLoop {
 public:
  TrainLoop(Transformer& model, ShardedTrainer& trainer, Communicator& comm, const Config& config);
  void step(std::int64_t iteration);

 private:
  Transformer& model_;
  ShardedTrainer& trainer_;
  Communicator& comm_;
  const Config& config_;
  DeviceView<float> mask_, loss_;
  DeviceView<float>::HostMirror mask_host_, loss_host_;
  Watchdog watchdog_;   // an iteration blocked anywhere (not only in a collective) ends the job
};

}  // namespace shardrl
