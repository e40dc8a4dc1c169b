#include "fsdp/shard_layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace shardrl {

ShardLayout::ShardLayout(const std::vector<UnitSpec>& units, int world_size, int rank, bool expert_parallel)
    : world_(world_size), rank_(rank) {
  const std::int64_t quantum = std::int64_t(world_size) * kParamAlignElements;
  for (const auto& u : units) {
    UnitShard s;
    s.numel = u.numel;
    std::vector<SlicePiece> pieces;
    if (expert_parallel && u.experts_begin >= 0) {
      const std::int64_t experts = u.param(".mlp.gate.weight").shape[0], region = u.numel - u.experts_begin;
      SHARDRL_CHECK(experts % world_size == 0 && u.experts_begin % quantum == 0 && region % experts == 0,
                    "expert parallelism: the experts must divide among the ranks");
      s.padded = u.numel;
      s.dense = u.experts_begin / world_size;
      s.experts_begin = u.experts_begin;
      const std::int64_t mine = region / world_size;   // this rank's experts, whole
      s.shard = s.dense + mine;
      s.gathered = u.experts_begin + mine;
      pieces.push_back({rank * s.dense, s.dense, 0});
      pieces.push_back({u.experts_begin + rank * mine, mine, s.dense});
    } else {
      s.padded = (u.numel + quantum - 1) / quantum * quantum;
      s.shard = s.padded / world_size;
      s.gathered = s.padded;
      pieces.push_back({rank * s.shard, s.shard, 0});
    }
    std::vector<SliceRange> ranges;
    for (const auto& p : u.params)
      for (const SlicePiece& piece : pieces) {
        const std::int64_t lo = std::max(p.offset, piece.flat_begin);
        const std::int64_t hi = std::min(p.offset + p.numel(), piece.flat_begin + piece.length);
        if (lo < hi)
          ranges.push_back({lo - piece.flat_begin + piece.slice_offset, hi - piece.flat_begin + piece.slice_offset,
                            p.no_decay});
      }
    shards_.push_back(s);
    pieces_.push_back(std::move(pieces));
    ranges_.push_back(std::move(ranges));
  }
}

ParamOverlap ShardLayout::overlap(int u, const ParamSpec& p) const {
  for (const SlicePiece& piece : pieces_[u]) {
    const std::int64_t lo = std::max(p.offset, piece.flat_begin);
    const std::int64_t hi = std::min(p.offset + p.numel(), piece.flat_begin + piece.length);
    if (lo < hi) return {lo - p.offset, hi - lo, lo - piece.flat_begin + piece.slice_offset};
  }
  return {};
}

std::int64_t ShardLayout::max_padded() const {
  std::int64_t m = 0;
  for (const auto& s : shards_) m = std::max(m, s.padded);
  return m;
}

std::int64_t ShardLayout::max_gathered() const {
  std::int64_t m = 0;
  for (const auto& s : shards_) m = std::max(m, s.gathered);
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
