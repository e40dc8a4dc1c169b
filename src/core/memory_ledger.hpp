// Every long-lived allocation of a rank is counted here under a category, so the memory a job
// holds can be printed, tested against its formula (docs/memory.md) and compared across
// iterations (a phase that allocates anew shows up). LedgerView is the counted device buffer.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/kokkos.hpp"

namespace shardrl {

enum class MemoryCategory { weights, grads, optimizer, gather, activations, workspace, kv_cache };
inline constexpr int kMemoryCategories = 7;
const char* category_name(MemoryCategory c);

class MemoryLedger {
 public:
  static MemoryLedger& instance();
  void add(MemoryCategory c, std::int64_t bytes);   // negative when freed
  std::int64_t bytes(MemoryCategory c) const { return bytes_[static_cast<int>(c)]; }
  std::int64_t total() const;
  std::int64_t peak() const { return peak_; }
  // Bytes of the state that lives for the whole job: weights, grads, optimizer.
  std::int64_t persistent() const;

 private:
  std::array<std::int64_t, kMemoryCategories> bytes_{};
  std::int64_t peak_ = 0;
};

// A device buffer of n elements of T counted in the ledger while it lives. Move-only, so a
// buffer is counted exactly once; never resized or re-pointed.
template <class T>
class LedgerView {
 public:
  LedgerView() = default;
  LedgerView(MemoryCategory category, const std::string& label, std::size_t n)
      : view_(label, n), category_(category) {
    MemoryLedger::instance().add(category_, bytes());
  }
  ~LedgerView() { release(); }
  LedgerView(LedgerView&& other) noexcept : view_(std::move(other.view_)), category_(other.category_) {
    other.view_ = DeviceView<T>();
  }
  LedgerView& operator=(LedgerView&& other) noexcept {
    if (this != &other) {
      release();
      view_ = std::move(other.view_);
      category_ = other.category_;
      other.view_ = DeviceView<T>();
    }
    return *this;
  }
  LedgerView(const LedgerView&) = delete;
  LedgerView& operator=(const LedgerView&) = delete;

  T* data() const { return view_.data(); }
  std::size_t size() const { return view_.extent(0); }
  std::int64_t bytes() const { return static_cast<std::int64_t>(size() * sizeof(T)); }
  const DeviceView<T>& view() const { return view_; }

 private:
  void release() {
    if (view_.data()) MemoryLedger::instance().add(category_, -bytes());
    view_ = DeviceView<T>();
  }
  DeviceView<T> view_;
  MemoryCategory category_ = MemoryCategory::workspace;
};

}  // namespace shardrl
