// The weights that a rollout phase generates with: every unit gathered once from the
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
  // Which experts of an MoE layer the set holds: all of them, or (expert-parallel decoding,
  // rollout.expert_parallel) this rank's own, each unit as a training gather holds it
  // (ShardedTrainer::gather_unit_as_trained) for a decoder built with the same exchange.
  enum class Experts { all, own };
  WeightSet(const ShardLayout& layout, std::size_t element_size, ArenaPlacement at = {}, Experts experts = Experts::all);
  // Tensor-parallel (rollout.tensor_parallel): rank `part` of `parts` keeps its part of every
  // unit, laid out as `part_units` (model_units of tensor_parallel_shape) describe. A decoder
  // layer is gathered whole into one staging buffer (the largest layer's size), its adapters
  // folded with `full_model`'s layout (the trainer's), then each parameter's part copied out: the
  // rows or the columns where the part's shape is 1/parts of the whole, else all of it. The
  // embedding and head units, kept whole, are gathered straight into their buffers. The set holds
  // 1/parts of the layers, the embedding and head, and the staging buffer.
  WeightSet(const ShardLayout& layout, Transformer& full_model, std::vector<UnitSpec> part_units, int part,
            int parts, std::size_t element_size, ArenaPlacement at);
  // Collective: gathers every unit from the trainer's shards. With LoRA, the adapters are then
  // folded into the base weights (Transformer::fold_adapters) by `decoder`, the model that will
  // decode with the set, and its adapters turned off: rollout samples the adapted policy at the
  // base model's cost per step.
  void materialize(ShardedTrainer& trainer, Transformer& decoder);
  // Every unit's buffer (in an arena: only while the rollout phase holds it).
  std::vector<const void*> units() const;

 private:
  void copy_part(int u, const void* whole, void* part) const;

  std::vector<LedgerView<char>> buffers_;
  Experts experts_ = Experts::all;
  // Tensor-parallel only.
  Transformer* full_model_ = nullptr;
  std::vector<UnitSpec> part_units_;
  std::vector<bool> whole_;   // units every rank keeps whole, gathered into their buffer
  int part_ = 0, parts_ = 1;
  std::size_t element_size_ = 0;
  LedgerView<char> staging_;
};

}  // namespace shardrl
