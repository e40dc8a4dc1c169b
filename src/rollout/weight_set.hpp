// The full weights that a rollout phase generates with: every unit gathered once from the
// shards at the start of the phase, in the compute type. Allocated once (ledger: gather) and
// refilled each phase, so no phase allocates anew.
#pragma once

#include <vector>

#include "core/memory_ledger.hpp"
#include "fsdp/sharded_trainer.hpp"

namespace shardrl {

class WeightSet {
 public:
  WeightSet(const ShardLayout& layout, std::size_t element_size);
  // Collective: gathers every unit from the trainer's shards.
  void materialize(ShardedTrainer& trainer);
  const std::vector<const void*>& units() const { return units_; }

 private:
  std::vector<LedgerView<char>> buffers_;
  std::vector<const void*> units_;
};

}  // namespace shardrl
