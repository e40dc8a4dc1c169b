// How each FSDP unit's flat parameter buffer is split across the data-parallel ranks. Gradients
// and optimizer state use the same layout.
//
// A unit is padded to a multiple of (world size x 128 elements) and rank r owns the contiguous
// range [r * shard, (r + 1) * shard): one piece. With expert parallelism, a mixture-of-experts
// layer's unit (model_units: its dense part, then E equal expert blocks) is owned in two pieces:
// rank r holds 1 / W of the dense part, [r * d, (r + 1) * d), which is all-gathered as usual,
// and experts r * E / W .. (r + 1) * E / W whole, which stay on the rank (the tokens travel to
// them instead). Both pieces are exact: the dense part is a multiple of E x 128 elements and W
// divides E. A rank's slice holds its pieces one after the other.
//
// With LoRA (frozen_base) only the adapters train. A decoder layer's unit (its base, then its
// adapters from UnitSpec::adapters_begin) is owned in two pieces, each sharded like a unit of its
// own: 1 / W of the padded base region, then 1 / W of the padded adapter region; both are
// gathered. The trainable state (fp32 main weights, gradients, moments) covers the second piece
// only; the other units (embedding, head) are frozen whole.
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_spec.hpp"

namespace shardrl {

// A range of the unit's flat buffer that this rank owns, and where it sits in the rank's slice.
struct SlicePiece {
  std::int64_t flat_begin = 0, length = 0, slice_offset = 0;
};

struct UnitShard {
  std::int64_t numel = 0;    // the unit's flat size (parameters and their alignment gaps)
  std::int64_t padded = 0;   // numel rounded up to a multiple of world * kParamAlignElements
  std::int64_t shard = 0;    // padded / world: elements per rank (the slice)
  // Expert-parallel units only (experts_begin >= 0): the dense piece's length (the first
  // `dense` elements of the slice) and where the experts start in the flat buffer; the rest of
  // the slice is this rank's experts.
  std::int64_t dense = 0;
  std::int64_t experts_begin = -1;
  // Elements of the unit a training gather holds and its backward writes: the whole padded
  // unit, or (expert-parallel) the dense part and then this rank's experts only, which is all
  // the model reads and writes there (its expert 0 being this rank's first).
  std::int64_t gathered = 0;
  // The trainable part of the slice: its last `trainable` elements, from `trainable_offset`
  // (without LoRA the whole slice; a frozen unit none). With LoRA's two pieces, `base` is the
  // first piece's length and `adapters_begin` where the second's region starts in the unit.
  std::int64_t trainable_offset = 0, trainable = 0;
  std::int64_t base = 0, adapters_begin = -1;
  // Where the adapters' region lies in a training gather's buffer (and the gradient's): at
  // adapters_begin, except with expert parallelism, whose gather holds this rank's experts only
  // and the adapters right after them (a gather of the whole unit still puts them at
  // adapters_begin).
  std::int64_t adapters_at = -1;
  bool expert_parallel() const { return experts_begin >= 0; }
  bool adapters() const { return adapters_begin >= 0; }
  // Where the part of a gradient buffer that backward writes and reduce-scatters begins: the
  // adapters' region with LoRA, else the whole unit.
  std::int64_t gradient_from() const { return adapters() ? adapters_at : 0; }
};

// A range of this rank's trainable slice covered by one trainable parameter, for per-parameter
// weight decay.
struct SliceRange {
  std::int64_t begin = 0, end = 0;   // offsets inside the trainable part of the slice
  bool no_decay = false;
};

// The part of a parameter (elements [offset, offset + numel) of its unit) this rank owns: `first`
// elements into the parameter, `count` of them, at `at` in the rank's slice. A parameter lies in
// one region of its unit, so it overlaps at most one piece.
struct ParamOverlap {
  std::int64_t first = 0, count = 0, at = 0;
};

class ShardLayout {
 public:
  // expert_parallel: the units with experts are owned expert by expert (their expert count must
  // be a multiple of world_size; a bug otherwise, since the config checks it).
  // frozen_base: a LoRA model (ModelShape::lora), whose adapters alone train.
  ShardLayout(const std::vector<UnitSpec>& units, int world_size, int rank, bool expert_parallel = false,
              bool frozen_base = false);

  int unit_count() const { return static_cast<int>(shards_.size()); }
  const UnitShard& unit(int u) const { return shards_[u]; }
  const std::vector<SlicePiece>& pieces(int u) const { return pieces_[u]; }
  const std::vector<SliceRange>& ranges(int u) const { return ranges_[u]; }
  ParamOverlap overlap(int u, const ParamSpec& p) const;
  // The same, placed in the trainable part of the slice (where the main weights, gradients and
  // moments of it live); a frozen parameter (LoRA's base) has none: count 0.
  ParamOverlap state_overlap(int u, const ParamSpec& p) const;
  std::int64_t max_padded() const;
  std::int64_t max_gathered() const;
  std::int64_t max_shard() const;
  std::int64_t max_trainable() const;
  std::int64_t total_shard() const;   // sum of this rank's slices: the persistent elements
  int world_size() const { return world_; }
  int rank() const { return rank_; }

 private:
  int world_, rank_;
  std::vector<UnitShard> shards_;
  std::vector<std::vector<SlicePiece>> pieces_;
  std::vector<std::vector<SliceRange>> ranges_;
};

}  // namespace shardrl
