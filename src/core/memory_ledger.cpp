#include "core/memory_ledger.hpp"

#include <algorithm>

namespace shardrl {

const char* category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::weights: return "weights";
    case MemoryCategory::grads: return "grads";
    case MemoryCategory::optimizer: return "optimizer";
    case MemoryCategory::gather: return "gather";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::workspace: return "workspace";
    case MemoryCategory::kv_cache: return "kv-cache";
  }
  return "?";
}

MemoryLedger& MemoryLedger::instance() {
  static MemoryLedger ledger;
  return ledger;
}

void MemoryLedger::add(MemoryCategory c, std::int64_t bytes) {
  bytes_[static_cast<int>(c)] += bytes;
  peak_ = std::max(peak_, total());
}

std::int64_t MemoryLedger::total() const {
  std::int64_t t = 0;
  for (auto b : bytes_) t += b;
  return t;
}

std::int64_t MemoryLedger::persistent() const {
  return bytes(MemoryCategory::weights) + bytes(MemoryCategory::grads) + bytes(MemoryCategory::optimizer);
}

}  // namespace shardrl
