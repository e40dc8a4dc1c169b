// A device buffer of n elements of T, counted in the memory ledger while it lives. Either its
// own allocation or a placement in a phase's region of a PhaseArena (then the arena counts it,
// and every data() checks that the buffer's phase holds the arena). Move-only, so a buffer is
// counted exactly once; never resized or re-pointed.
#pragma once

#include <string>

#include "core/kokkos.hpp"
#include "core/memory_ledger.hpp"
#include "core/phase_arena.hpp"
#include "core/zeroed_view.hpp"

namespace shardrl {

template <class T>
class LedgerView {
 public:
  LedgerView() = default;
  LedgerView(MemoryCategory category, const std::string& label, std::size_t n) : LedgerView(ArenaPlacement{}, category, label, n) {}
  LedgerView(ArenaPlacement at, MemoryCategory category, const std::string& label, std::size_t n)
      : category_(category), at_(at), n_(n), label_(label) {
    if (at_.arena) {
      offset_ = at_.arena->reserve(at_.phase, category, n * sizeof(T));
    } else {
      view_ = zeroed_view<T>(label, n);
      MemoryLedger::instance().add(category_, allocated_bytes());
    }
  }
  ~LedgerView() { release(); }
  LedgerView(LedgerView&& other) noexcept { take(other); }
  LedgerView& operator=(LedgerView&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  LedgerView(const LedgerView&) = delete;
  LedgerView& operator=(const LedgerView&) = delete;

  T* data() const {
    if (at_.arena) return reinterpret_cast<T*>(at_.arena->address(at_.phase, offset_, label_.c_str()));
    return view_.data();
  }
  // The buffer as a Kokkos view (not owning: this object does), for deep_copy and mirrors.
  Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view() const {
    return Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(data(), n_);
  }
  std::size_t size() const { return n_; }
  std::int64_t bytes() const { return static_cast<std::int64_t>(n_ * sizeof(T)); }
  bool in_arena() const { return at_.arena != nullptr; }

 private:
  // What an own allocation takes: Kokkos rounds every allocation up to a multiple of 8 bytes, and
  // the ledger counts what is allocated.
  std::int64_t allocated_bytes() const { return (bytes() + 7) / 8 * 8; }
  void release() {
    if (view_.data()) MemoryLedger::instance().add(category_, -allocated_bytes());
    view_ = DeviceView<T>();
    at_ = ArenaPlacement{};
    n_ = 0;
  }
  void take(LedgerView& other) {
    view_ = std::move(other.view_);
    category_ = other.category_;
    at_ = other.at_;
    n_ = other.n_;
    offset_ = other.offset_;
    label_ = std::move(other.label_);
    other.view_ = DeviceView<T>();
    other.at_ = ArenaPlacement{};
    other.n_ = 0;
  }

  DeviceView<T> view_;
  MemoryCategory category_ = MemoryCategory::workspace;
  ArenaPlacement at_;
  std::size_t n_ = 0;
  std::size_t offset_ = 0;
  std::string label_;
};

}  // namespace shardrl
