// One device allocation that the two phases of an RL iteration take turns to use: the rollout's
// materialised weights, KV cache and generation activations, and training's gather slots,
// full-unit gradient buffers and activations never live at the same time, so a rank holds
// max(rollout, train) transient bytes instead of their sum (DESIGN.md invariant 4: setup once,
// nothing allocated at phase entry).
//
// Buffers are placed in constructors (reserve: an offset within their phase's region), the
// arena is allocated once by commit(), and enter() hands it to one phase. Every access goes
// through address(), which stops with an error when a buffer is used outside its phase, so a
// stale pointer from the other phase cannot silently read garbage.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device_allocation.hpp"
#include "core/kokkos.hpp"
#include "core/memory_ledger.hpp"

namespace shardrl {

enum class Phase { train = 0, rollout = 1 };
inline constexpr int kPhases = 2;
const char* phase_name(Phase p);

class PhaseArena {
 public:
  // poison_on_enter: fill the whole arena with NaN at every phase change (debug.check_released),
  // so a buffer that relied on contents from before the phase fails loudly in tests.
  explicit PhaseArena(const ExecSpace& space, bool poison_on_enter = false);
  ~PhaseArena();
  PhaseArena(const PhaseArena&) = delete;
  PhaseArena& operator=(const PhaseArena&) = delete;

  // Before commit(): room for `bytes` in phase p's region; returns its offset.
  std::size_t reserve(Phase p, MemoryCategory c, std::size_t bytes);
  // What commit() needs: the larger phase's bytes.
  std::size_t required_bytes() const;
  // Allocates max over phases (and 256 bytes to align its start), once, or takes `storage` (at
  // least required_bytes(), aligned; zeroed here, as an own allocation is) when given; counted in
  // the ledger under the categories of the larger phase. Nothing may be reserved afterwards.
  void commit(std::unique_ptr<DeviceAllocation> storage = nullptr);
  // Waits for all device work of the previous phase, then gives the arena to p.
  void enter(Phase p);

  bool committed() const { return committed_; }
  bool in_phase(Phase p) const { return current_ == static_cast<int>(p); }
  // The device address of a reserved buffer; stops with an error naming `label` if the arena
  // is not committed or p is not the current phase.
  char* address(Phase p, std::size_t offset, const char* label) const;

  std::int64_t phase_bytes(Phase p) const { return static_cast<std::int64_t>(used_[static_cast<int>(p)]); }
  std::int64_t phase_bytes(Phase p, MemoryCategory c) const;
  // A digest of every reservation (phase, category, size, offset) in order: equal on two ranks
  // when their buffers lie at the same offsets (what collectives on symmetric memory need).
  std::uint64_t layout_fingerprint() const { return fingerprint_; }
  std::int64_t bytes() const {   // the allocation
    return static_cast<std::int64_t>(external_ ? external_->bytes() : storage_.extent(0));
  }
  bool external() const { return external_ != nullptr; }   // storage given to commit()

 private:
  ExecSpace space_;
  bool poison_;
  bool committed_ = false;
  int current_ = -1;   // no phase yet
  std::array<std::size_t, kPhases> used_{};
  std::uint64_t fingerprint_ = 14695981039346656037ull;   // FNV-1a's offset basis
  std::array<std::array<std::int64_t, kMemoryCategories>, kPhases> by_category_{};
  std::array<std::int64_t, kMemoryCategories> counted_{};   // what commit() added to the ledger
  DeviceView<char> storage_;
  std::unique_ptr<DeviceAllocation> external_;
  char* base_ = nullptr;   // where offset 0 is: the allocation's first 256-byte boundary
};

// Where a LedgerView lives: its own allocation (no arena) or a phase's region of an arena.
struct ArenaPlacement {
  PhaseArena* arena = nullptr;
  Phase phase = Phase::train;
};

}  // namespace shardrl
