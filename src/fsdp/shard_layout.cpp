#include "fsdp/shard_layout.hpp"

#include <algorithm>

namespace shardrl {

ShardLayout::ShardLayout(const std::vector<UnitSpec>& units, int world_size, int rank) : world_(world_size) {
  const std::int64_t quantum = std::int64_t(world_size) * kParamAlignElements;
  for (const auto& u : units) {
    UnitShard s;
    s.numel = u.numel;
    s.padded = (u.numel + quantum - 1) / quantum * quantum;
    s.shard = s.padded / world_size;
    s.begin = std::int64_t(rank) * s.shard;
    shards_.push_back(s);
    std::vector<SliceRange> ranges;
    for (const auto& p : u.params) {
      std::int64_t lo = std::max(p.offset, s.begin), hi = std::min(p.offset + p.numel(), s.begin + s.shard);
      if (lo < hi) ranges.push_back({lo - s.begin, hi - s.begin, p.no_decay});
    }
    ranges_.push_back(std::move(ranges));
  }
}

std::int64_t ShardLayout::max_padded() const {
  std::int64_t m = 0;
  for (const auto& s : shards_) m = std::max(m, s.padded);
  return m;
}

std::int64_t ShardLayout::max_shard() const {
  std::int64_t m = 0;
  for (const auto& s : shards_) m = std::max(m, s.shard);
  return m;
}

std::int64_t ShardLayout::total_shard() const {
  std::int64_t t = 0;
  for (const auto& s : shards_) t += s.shard;
  return t;
}

}  // namespace shardrl
