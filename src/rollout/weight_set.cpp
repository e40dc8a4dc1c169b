#include "rollout/weight_set.hpp"

namespace shardrl {

WeightSet::WeightSet(const ShardLayout& layout, std::size_t element_size, ArenaPlacement at) {
  for (int u = 0; u < layout.unit_count(); ++u) {
    buffers_.emplace_back(at, MemoryCategory::gather, "rollout_weights", static_cast<std::size_t>(layout.unit(u).padded) * element_size);
  }
}

std::vector<const void*> WeightSet::units() const {
  std::vector<const void*> out;
  for (const auto& b : buffers_) out.push_back(b.data());
  return out;
}

void WeightSet::materialize(ShardedTrainer& trainer, Transformer& decoder) {
  std::vector<void*> out;
  for (auto& b : buffers_) out.push_back(b.data());
  trainer.gather_all_units(out);
  if (!decoder.options().shape.lora.on()) return;
  for (std::size_t u = 0; u < out.size(); ++u) decoder.fold_adapters(static_cast<int>(u), out[u]);
  decoder.set_adapters(false);
}

}  // namespace shardrl
