#include "core/phase_arena.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "core/zeroed_view.hpp"

namespace shardrl {
namespace {
// Every buffer starts on a 256-byte boundary: what cuBLAS and vector loads want.
constexpr std::size_t kAlign = 256;
}  // namespace

const char* phase_name(Phase p) { return p == Phase::train ? "train" : "rollout"; }

PhaseArena::PhaseArena(const ExecSpace& space, bool poison_on_enter) : space_(space), poison_(poison_on_enter) {}

PhaseArena::~PhaseArena() {
  for (int c = 0; c < kMemoryCategories; ++c)
    if (counted_[c]) MemoryLedger::instance().add(static_cast<MemoryCategory>(c), -counted_[c]);
}

std::size_t PhaseArena::reserve(Phase p, MemoryCategory c, std::size_t bytes) {
  SHARDRL_CHECK(!committed_, "a buffer reserved in the phase arena after it was allocated");
  const int i = static_cast<int>(p);
  const std::size_t offset = used_[i];
  used_[i] += (bytes + kAlign - 1) / kAlign * kAlign;
  by_category_[i][static_cast<int>(c)] += static_cast<std::int64_t>(bytes);
  for (std::uint64_t v : {std::uint64_t(i), std::uint64_t(c), std::uint64_t(bytes), std::uint64_t(offset)})
    fingerprint_ = (fingerprint_ ^ v) * 1099511628211ull;   // FNV-1a's prime
  return offset;
}

std::int64_t PhaseArena::phase_bytes(Phase p, MemoryCategory c) const {
  return by_category_[static_cast<int>(p)][static_cast<int>(c)];
}

std::size_t PhaseArena::required_bytes() const { return std::max<std::size_t>(std::max(used_[0], used_[1]), 1); }

void PhaseArena::commit(std::unique_ptr<DeviceAllocation> storage) {
  SHARDRL_CHECK(!committed_, "the phase arena is allocated twice");
  const int larger = used_[0] >= used_[1] ? 0 : 1;
  if (storage) {
    SHARDRL_CHECK(storage->bytes() >= required_bytes(),
                  fmt::format("the phase arena needs {} bytes, but was given {}", required_bytes(), storage->bytes()));
    SHARDRL_CHECK(reinterpret_cast<std::uintptr_t>(storage->data()) % kAlign == 0,
                  fmt::format("the phase arena's storage does not start on a {}-byte boundary", kAlign));
    external_ = std::move(storage);
    base_ = external_->data();
    // Zeroed as a Kokkos allocation is, so that results never depend on who allocated.
    Kokkos::deep_copy(space_, Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                  base_, external_->bytes()),
                      char(0));
    space_.fence();
  } else {
    // A Kokkos allocation starts past its header, on a 128-byte boundary only: the base is
    // rounded up, so that every buffer starts where the offsets say, whoever allocated the arena
    // (cuBLAS picks its kernels by the operands' alignment, so results depend on it).
    storage_ = zeroed_view<char>("phase_arena", required_bytes() + kAlign);
    const auto at = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = storage_.data() + (kAlign - at % kAlign) % kAlign;
  }
  // The ledger sees the arena as the larger phase's buffers plus alignment padding (workspace).
  std::int64_t named = 0;
  for (int c = 0; c < kMemoryCategories; ++c) {
    counted_[c] = by_category_[larger][c];
    named += counted_[c];
  }
  counted_[static_cast<int>(MemoryCategory::workspace)] += bytes() - named;
  for (int c = 0; c < kMemoryCategories; ++c)
    if (counted_[c]) MemoryLedger::instance().add(static_cast<MemoryCategory>(c), counted_[c]);
  committed_ = true;
}

void PhaseArena::enter(Phase p) {
  SHARDRL_CHECK(committed_, fmt::format("the {} phase entered before the phase arena was allocated", phase_name(p)));
  if (current_ == static_cast<int>(p)) return;
  Kokkos::fence();   // the previous phase's kernels and collectives are done
  current_ = static_cast<int>(p);
  if (poison_) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto words = Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
        reinterpret_cast<float*>(base_), required_bytes() / sizeof(float));
    Kokkos::deep_copy(space_, words, nan);
    space_.fence();
  }
}

char* PhaseArena::address(Phase p, std::size_t offset, const char* label) const {
  if (!committed_)
    SHARDRL_FATAL(fmt::format("buffer '{}' of the {} phase used before the phase arena was allocated", label,
                              phase_name(p)));
  if (current_ != static_cast<int>(p))
    SHARDRL_FATAL(fmt::format("buffer '{}' of the {} phase used during the {} phase: its memory belongs to the "
                              "other phase now",
                              label, phase_name(p), current_ < 0 ? "no" : phase_name(static_cast<Phase>(current_))));
  return base_ + offset;
}

}  // namespace shardrl
