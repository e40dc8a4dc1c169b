#include "rollout/weight_set.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/error.hpp"

namespace shardrl {
namespace {

// Bit copies of a parameter's part, in an element type of the compute type's size.
template <class E>
void copy_parameter_part(const ExecSpace& space, const E* whole, const std::vector<std::int64_t>& whole_shape, E* part,
                         const std::vector<std::int64_t>& part_shape, int index) {
  using Flat = Kokkos::View<E*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Matrix = Kokkos::View<E**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  std::int64_t n = 1;
  for (std::int64_t e : part_shape) n *= e;
  if (whole_shape == part_shape) {   // the norms, the embedding, the head: every rank all of it
    Kokkos::deep_copy(space, Flat(part, n), Flat(const_cast<E*>(whole), n));
    return;
  }
  SHARDRL_CHECK(whole_shape.size() == 2 && part_shape.size() == 2, "a split parameter is a matrix");
  const std::int64_t R = whole_shape[0], C = whole_shape[1], r = part_shape[0], c = part_shape[1];
  if (C == c) {   // rows (q, k, v, gate, up: out x in): one contiguous block
    Kokkos::deep_copy(space, Flat(part, n), Flat(const_cast<E*>(whole) + index * r * C, n));
    return;
  }
  SHARDRL_CHECK(R == r, "a parameter's part is its rows or its columns");
  // Columns (o, down: out x in, the input split): a strided block.
  const Matrix from(const_cast<E*>(whole), R, C);
  Kokkos::deep_copy(space, Matrix(part, r, c), Kokkos::subview(from, Kokkos::ALL, Kokkos::make_pair(index * c, index * c + c)));
}

}  // namespace

WeightSet::WeightSet(const ShardLayout& layout, std::size_t element_size, ArenaPlacement at, Experts experts)
    : experts_(experts) {
  for (int u = 0; u < layout.unit_count(); ++u) {
    const std::int64_t n = experts == Experts::own ? layout.unit(u).gathered : layout.unit(u).padded;
    buffers_.emplace_back(at, MemoryCategory::gather, "rollout_weights", static_cast<std::size_t>(n) * element_size);
  }
}

WeightSet::WeightSet(const ShardLayout& layout, Transformer& full_model, std::vector<UnitSpec> part_units, int part,
                     int parts, std::size_t element_size, ArenaPlacement at)
    : full_model_(&full_model), part_units_(std::move(part_units)), part_(part), parts_(parts),
      element_size_(element_size) {
  SHARDRL_CHECK(static_cast<int>(part_units_.size()) == layout.unit_count(), "one part per unit");
  // A unit every rank keeps whole (the embedding, the final norm and head) is gathered straight
  // into its buffer; the staging buffer holds the largest of the others (a decoder layer).
  std::int64_t largest = 0;
  for (int u = 0; u < layout.unit_count(); ++u) {
    const bool whole = part_units_[u].numel == full_model.units()[u].numel;
    whole_.push_back(whole);
    if (!whole) largest = std::max(largest, layout.unit(u).padded);
    buffers_.emplace_back(at, MemoryCategory::gather, "rollout_weights",
                          static_cast<std::size_t>(whole ? layout.unit(u).padded : part_units_[u].numel) * element_size);
  }
  staging_ = LedgerView<char>(at, MemoryCategory::gather, "rollout_unit_staging", static_cast<std::size_t>(largest) * element_size);
}

std::vector<const void*> WeightSet::units() const {
  std::vector<const void*> out;
  for (const auto& b : buffers_) out.push_back(b.data());
  return out;
}

void WeightSet::copy_part(int u, const void* whole, void* part) const {
  const UnitSpec& full = full_model_->units()[u];
  for (const ParamSpec& p : part_units_[u].params) {
    const auto it = std::find_if(full.params.begin(), full.params.end(), [&](const ParamSpec& f) { return f.name == p.name; });
    SHARDRL_CHECK(it != full.params.end(), "a part's parameter is one of the whole unit's");
    if (element_size_ == 2)
      copy_parameter_part(full_model_->space(), static_cast<const std::uint16_t*>(whole) + it->offset, it->shape,
                          static_cast<std::uint16_t*>(part) + p.offset, p.shape, part_);
    else
      copy_parameter_part(full_model_->space(), static_cast<const float*>(whole) + it->offset, it->shape,
                          static_cast<float*>(part) + p.offset, p.shape, part_);
  }
}

void WeightSet::materialize(ShardedTrainer& trainer, Transformer& decoder) {
  if (full_model_) {   // tensor-parallel: one whole unit at a time, this rank's part kept
    const bool lora = full_model_->options().shape.lora.on();
    for (int u = 0; u < static_cast<int>(buffers_.size()); ++u) {
      if (whole_[u]) {   // no adapters in these units
        trainer.gather_unit(u, buffers_[u].data());
        continue;
      }
      trainer.gather_unit(u, staging_.data());
      if (lora) full_model_->fold_adapters(u, staging_.data(), &decoder.gemm());   // the rollout phase's GEMMs
      copy_part(u, staging_.data(), buffers_[u].data());
    }
    full_model_->space().fence();
    return;
  }
  std::vector<void*> out;
  for (auto& b : buffers_) out.push_back(b.data());
  if (experts_ == Experts::own) {
    for (std::size_t u = 0; u < out.size(); ++u) trainer.gather_unit_as_trained(static_cast<int>(u), out[u]);
    decoder.space().fence();
  } else {
    trainer.gather_all_units(out);
  }
  if (!decoder.options().shape.lora.on()) return;
  for (std::size_t u = 0; u < out.size(); ++u) decoder.fold_adapters(static_cast<int>(u), out[u]);
  decoder.set_adapters(false);
}

}  // namespace shardrl
