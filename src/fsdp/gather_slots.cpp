#include "fsdp/gather_slots.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "kernels/elementwise.hpp"

namespace shardrl {

GatherSlots::GatherSlots(int count, std::int64_t elements, std::size_t element_size, bool check_released,
                         ArenaPlacement at, const ExecSpace& space)
    : holder_(count, -1), generation_(count, 0), elements_(elements), element_size_(element_size),
      check_(check_released), space_(space) {
  for (int i = 0; i < count; ++i)
    buffers_.emplace_back(at, MemoryCategory::gather, "gather_slot", static_cast<std::size_t>(elements) * element_size);
}

GatherSlots GatherSlots::views(int count, const ExecSpace& space) {
  GatherSlots slots(0, 0, 0, false, ArenaPlacement{}, space);
  slots.holder_.assign(count, -1);
  slots.generation_.assign(count, 0);
  slots.view_.assign(count, nullptr);
  slots.views_ = true;
  return slots;
}

int GatherSlots::holding(int unit) const {
  for (std::size_t s = 0; s < holder_.size(); ++s)
    if (holder_[s] == unit) return static_cast<int>(s);
  return -1;
}

bool GatherSlots::has_free() const { return holding(-1) >= 0; }

GatheredUnit GatherSlots::claim(int unit, const void* view) {
  SHARDRL_CHECK(holding(unit) < 0, fmt::format("unit {} is already gathered", unit));
  SHARDRL_CHECK(views_ == (view != nullptr), "a slot of views is claimed with its view, a slot of memory without");
  int s = holding(-1);
  SHARDRL_CHECK(s >= 0, fmt::format("no free gather slot for unit {}: the schedule holds too many units", unit));
  holder_[s] = unit;
  generation_[s] = next_generation_++;
  if (views_) view_[s] = view;
  return GatheredUnit{unit, s, generation_[s], buffer(s)};
}

void* GatherSlots::buffer(int slot) const {
  return views_ ? const_cast<void*>(view_[slot]) : buffers_[slot].data();
}

void GatherSlots::release(int unit) {
  int s = holding(unit);
  SHARDRL_CHECK(s >= 0, fmt::format("release of unit {}, which is not gathered", unit));
  holder_[s] = -1;
  generation_[s] = 0;
  if (views_) view_[s] = nullptr;
  if (check_) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (element_size_ == sizeof(bf16))
      kernels::fill(space_, reinterpret_cast<bf16*>(buffers_[s].data()), nan, elements_);
    else
      kernels::fill(space_, reinterpret_cast<float*>(buffers_[s].data()), nan, elements_);
  }
}

void GatherSlots::verify(const GatheredUnit& g, const char* use) const {
  if (g.slot < 0 || holder_[g.slot] != g.unit || generation_[g.slot] != g.generation)
    SHARDRL_FATAL(fmt::format("{} of unit {} uses weights that were released (slot {} now holds unit {}, "
                              "generation {} instead of {})",
                              use, g.unit, g.slot, g.slot >= 0 ? holder_[g.slot] : -1,
                              g.slot >= 0 ? generation_[g.slot] : 0, g.generation));
}

GatheredUnit GatherSlots::current(int unit) const {
  int s = holding(unit);
  SHARDRL_CHECK(s >= 0, fmt::format("unit {} is not gathered", unit));
  return GatheredUnit{unit, s, generation_[s], buffer(s)};
}

}  // namespace shardrl
