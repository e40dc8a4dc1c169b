// Every long-lived allocation of a rank is counted here under a category, so the memory a job
// holds can be printed, tested against its formula (docs/memory.md) and compared across
// iterations (a phase that allocates anew shows up). LedgerView (ledger_view.hpp) is the counted
// device buffer.
#pragma once

#include <array>
#include <cstdint>
#include <string>

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

}  // namespace shardrl
