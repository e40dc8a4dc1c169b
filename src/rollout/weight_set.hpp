// The full weights that a rollout phase generates with: every unit gathered once from the
// shards at the start of the phase, in the compute type. Allocated once (ledger: gather) and
// refilled each phase, so no phase allocates anew; in a PhaseArena it shares its memory with
// training's transient buffers.
#pragma once

#include <vector>

#include "core/ledger_view.hpp"
#include "fsdp/sharded_trainer.hpp"

namespace shardrl {

class WeightSet {
 public:
  WeightSet(const ShardLayout& layout, std::size_t element_size, ArenaPlacement at = {});
  // Collective: gathers every unit from the trainer's shards.
  void materialize(ShardedTrainer& trainer);
  // Every unit's buffer (in an arena: only while the rollout phase holds it).
  std::vector<const void*> units() const;

 private:
  std::vector<LedgerView<char>> buffers_;
};

}  // namespace shardrl
