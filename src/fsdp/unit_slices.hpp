// One persistent slice buffer per FSDP unit (this rank's `shard` elements of it, or only their
// trainable part: UnitShard::trainable), all of one
// element type chosen at construction, fp32 or bf16, with the type as a tag beside them. Every
// use goes through visit(), which hands the unit's buffer in its own type, so the trainer's
// kernels are instantiated once for each type and no code chooses a type by which of two
// parallel vectors happens to be empty. Counted in the ledger under the category given.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/bf16.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/ledger_view.hpp"
#include "fsdp/shard_layout.hpp"

namespace shardrl {

class UnitSlices {
 public:
  UnitSlices() = default;   // none: e.g. no bf16 copy of the weights in fp32 mode
  // The whole slice of each unit (the weights a gather reads), or only its trainable part
  // (UnitShard::trainable: the fp32 main weights, gradients and moments).
  enum class Extent { slice, trainable };
  UnitSlices(const ShardLayout& layout, GradDtype type, MemoryCategory category, const char* label,
             Extent extent = Extent::slice)
      : type_(type) {
    const std::size_t element = type == GradDtype::bf16 ? sizeof(bf16) : sizeof(float);
    for (int u = 0; u < layout.unit_count(); ++u) {
      const UnitShard& s = layout.unit(u);
      buffers_.emplace_back(category, label,
                            static_cast<std::size_t>(extent == Extent::slice ? s.shard : s.trainable) * element);
    }
  }

  bool empty() const { return buffers_.empty(); }
  GradDtype type() const { return type_; }
  const void* address(int u) const { return buffers_[static_cast<std::size_t>(u)].data(); }

  // f(p) with p the unit's buffer as float* or bf16*; returns what f returns.
  template <class F>
  decltype(auto) visit(int u, F&& f) const {
    char* p = buffers_[static_cast<std::size_t>(u)].data();
    if (type_ == GradDtype::bf16) return f(reinterpret_cast<bf16*>(p));
    return f(reinterpret_cast<float*>(p));
  }
  // The unit's buffer as T*, for a caller that has the type from a sibling's visit (the Adam
  // moments share theirs); stops with an error if T is not the buffers' type.
  template <class T>
  T* as(int u) const {
    constexpr bool half = std::is_same_v<T, bf16>;
    SHARDRL_CHECK((type_ == GradDtype::bf16) == half, "unit slices read in another element type");
    return reinterpret_cast<T*>(buffers_[static_cast<std::size_t>(u)].data());
  }

 private:
  GradDtype type_ = GradDtype::fp32;
  std::vector<LedgerView<char>> buffers_;
};

}  // namespace shardrl
