// How each FSDP unit's flat parameter buffer is split across the data-parallel ranks: padded to
// a multiple of (world size x 128 elements), rank r owns the contiguous slice
// [r * shard, (r + 1) * shard). Gradients and optimizer state use the same layout.
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_spec.hpp"

namespace shardrl {

struct UnitShard {
  std::int64_t numel = 0;    // the unit's flat size (parameters and their alignment gaps)
  std::int64_t padded = 0;   // numel rounded up to a multiple of world * kParamAlignElements
  std::int64_t shard = 0;    // padded / world: elements per rank
  std::int64_t begin = 0;    // this rank's first element in the unit's flat buffer
};

// A range of this rank's slice covered by one parameter, for per-parameter weight decay.
struct SliceRange {
  std::int64_t begin = 0, end = 0;   // offsets inside the slice
  bool no_decay = false;
};

class ShardLayout {
 public:
  ShardLayout(const std::vector<UnitSpec>& units, int world_size, int rank);

  int unit_count() const { return static_cast<int>(shards_.size()); }
  const UnitShard& unit(int u) const { return shards_[u]; }
  const std::vector<SliceRange>& ranges(int u) const { return ranges_[u]; }
  std::int64_t max_padded() const;
  std::int64_t max_shard() const;
  std::int64_t total_shard() const;   // sum of this rank's slices: the persistent elements
  int world_size() const { return world_; }

 private:
  int world_;
  std::vector<UnitShard> shards_;
  std::vector<std::vector<SliceRange>> ranges_;
};

}  // namespace shardrl
