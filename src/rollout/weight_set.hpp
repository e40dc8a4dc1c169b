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
  // Collective: gathers every unit from the trainer's shards. With LoRA, the adapters are then
  // folded into the base weights (Transformer::fold_adapters) by `decoder`, the model that will
  // decode with the set, and its adapters turned off: rollout samples the adapted policy at the
  // base model's cost per step.
  void materialize(ShardedTrainer& trainer, Transformer& decoder);
  // Every unit's buffer (in an arena: only while the rollout phase holds it).
  std::vector<const void*> units() const;

 private:
  std::vector<LedgerView<char>> buffers_;
};

}  // namespace shardrl
