// The buffers that hold gathered (full, compute-type) unit weights, and which unit each holds.
// A unit is used through a GatheredUnit handle; using it after its slot was released (or
// refilled) is caught: the handle's generation no longer matches, and with check_released the
// slot's contents are NaN. The fifth upstream failure (a fused kernel reading released
// weights) cannot happen unnoticed. Slots of views own no memory: a claim names the weights
// (at one rank a unit's own slice is the whole unit), and the generations hold as before.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ledger_view.hpp"

namespace shardrl {

struct GatheredUnit {
  int unit = -1;
  int slot = -1;
  std::uint64_t generation = 0;
  const void* weights = nullptr;
};

class GatherSlots {
 public:
  // `count` slots of `elements` elements of `element_size` bytes each.
  GatherSlots(int count, std::int64_t elements, std::size_t element_size, bool check_released,
              ArenaPlacement at, const ExecSpace& space);
  // `count` slots of views (no memory, nothing to poison: check_released is not taken).
  static GatherSlots views(int count, const ExecSpace& space);

  int count() const { return static_cast<int>(buffers_.size()); }   // slots that own memory
  int holding(int unit) const;            // slot holding `unit`, or -1
  bool has_free() const;
  // Claims a free slot for `unit` (fatal if none: a schedule bug); a slot of views holds `view`.
  GatheredUnit claim(int unit, const void* view = nullptr);
  bool holds_views() const { return views_; }
  void* buffer(int slot) const;
  // The slot no longer holds its unit; poisoned when checking is on.
  void release(int unit);
  // Fatal unless `g` is still the live content of its slot.
  void verify(const GatheredUnit& g, const char* use) const;
  GatheredUnit current(int unit) const;   // handle of a held unit (fatal if not held)

 private:
  std::vector<int> holder_;
  std::vector<std::uint64_t> generation_;
  std::uint64_t next_generation_ = 1;
  std::vector<LedgerView<char>> buffers_;
  std::vector<const void*> view_;   // per slot: what a slot of views holds
  bool views_ = false;
  std::int64_t elements_;
  std::size_t element_size_;
  bool check_;
  ExecSpace space_;
};

}  // namespace shardrl
