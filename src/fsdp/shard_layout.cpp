#include "fsdp/shard_layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace shardrl {

ShardLayout::ShardLayout(const std::vector<UnitSpec>& units, int world_size, int rank, bool expert_parallel,
                         bool frozen_base)
    : world_(world_size), rank_(rank) {
  const std::int64_t quantum = std::int64_t(world_size) * kParamAlignElements;
  auto round_up = [&](std::int64_t n) { return (n + quantum - 1) / quantum * quantum; };
  for (const auto& u : units) {
    UnitShard s;
    s.numel = u.numel;
    std::vector<SlicePiece> pieces;
    if (frozen_base && u.adapters_begin >= 0 && expert_parallel && u.experts_begin >= 0) {
      // LoRA with expert parallelism: three pieces, the dense base and the adapters each split
      // evenly, this rank's experts whole (the adapters follow the experts in the unit).
      const std::int64_t experts = u.param(".mlp.gate.weight").shape[0], region = u.adapters_begin - u.experts_begin;
      SHARDRL_CHECK(experts % world_size == 0 && u.experts_begin % quantum == 0 && region % experts == 0,
                    "expert parallelism: the experts must divide among the ranks");
      const std::int64_t mine = region / world_size, adapters = round_up(u.numel - u.adapters_begin);
      s.dense = u.experts_begin / world_size;
      s.experts_begin = u.experts_begin;
      s.adapters_begin = u.adapters_begin;
      s.trainable = adapters / world_size;
      s.base = s.dense + mine;
      s.trainable_offset = s.base;
      s.shard = s.base + s.trainable;
      s.adapters_at = u.experts_begin + mine;
      s.gathered = s.adapters_at + adapters;
      s.padded = u.adapters_begin + adapters;
      pieces.push_back({rank * s.dense, s.dense, 0});
      pieces.push_back({u.experts_begin + rank * mine, mine, s.dense});
      pieces.push_back({u.adapters_begin + rank * s.trainable, s.trainable, s.base});
    } else if (frozen_base && u.adapters_begin >= 0) {
      // Two regions, each padded and split evenly. The base piece's flat range is clipped to
      // the base (the last ranks' may lie in its padding); its slot in the slice stays `base`
      // long, so every rank gathers the same count. Gathered base-first, the padding of the
      // base's last piece lands on the adapters' first elements and the adapters' gather, which
      // spans at least one quantum, writes over it.
      const std::int64_t base_padded = round_up(u.adapters_begin), region = round_up(u.numel - u.adapters_begin);
      s.base = base_padded / world_size;
      s.adapters_begin = s.adapters_at = u.adapters_begin;
      s.trainable = region / world_size;
      s.trainable_offset = s.base;
      s.shard = s.base + s.trainable;
      s.padded = std::max(base_padded, u.adapters_begin + region);
      s.gathered = s.padded;
      const std::int64_t base_begin = std::min(rank * s.base, u.adapters_begin);
      pieces.push_back({base_begin, std::min(s.base, u.adapters_begin - base_begin), 0});
      pieces.push_back({u.adapters_begin + rank * s.trainable, s.trainable, s.base});
    } else if (expert_parallel && u.experts_begin >= 0) {
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
      s.padded = round_up(u.numel);
      s.shard = s.padded / world_size;
      s.gathered = s.padded;
      pieces.push_back({rank * s.shard, s.shard, 0});
    }
    if (!s.adapters()) {   // without LoRA all trainable; with it, a unit without adapters is frozen
      s.trainable = frozen_base ? 0 : s.shard;
      s.trainable_offset = s.shard - s.trainable;
    }
    std::vector<SliceRange> ranges;
    for (const auto& p : u.params)
      for (const SlicePiece& piece : pieces) {
        const std::int64_t lo = std::max(p.offset, piece.flat_begin);
        const std::int64_t hi = std::min(p.offset + p.numel(), piece.flat_begin + piece.length);
        const std::int64_t at = lo - piece.flat_begin + piece.slice_offset - s.trainable_offset;
        if (lo < hi && at >= 0) ranges.push_back({at, at + hi - lo, p.no_decay});
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

ParamOverlap ShardLayout::state_overlap(int u, const ParamSpec& p) const {
  ParamOverlap o = overlap(u, p);
  o.at -= shards_[u].trainable_offset;
  if (o.count == 0 || o.at < 0) return {};
  return o;
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

std::int64_t ShardLayout::max_trainable() const {
  std::int64_t m = 0;
  for (const auto& s : shards_) m = std::max(m, s.trainable);
  return m;
}

std::int64_t ShardLayout::total_shard() const {
  std::int64_t t = 0;
  for (const auto& s : shards_) t += s.shard;
  return t;
}

}  // namespace shardrl
