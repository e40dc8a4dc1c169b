#include "model/kv_cache.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl {

KvCache::KvCache(const ModelShape& s, int rows, int max_len, std::size_t element_size, ArenaPlacement at)
    : rows_(rows), max_len_(max_len), n_heads_(s.n_heads), n_kv_heads_(s.n_kv_heads), head_dim_(s.head_dim),
      element_size_(element_size) {
  const std::size_t bytes = std::size_t(rows) * max_len * s.n_kv_heads * s.head_dim * element_size;
  for (int l = 0; l < s.n_layers; ++l) {
    k_.emplace_back(at, MemoryCategory::kv_cache, "kv_cache_k", bytes);
    v_.emplace_back(at, MemoryCategory::kv_cache, "kv_cache_v", bytes);
  }
  allocate_decode_split(at);
}

KvCache::KvCache(const ModelShape& s, const Paged& p, int max_len, std::size_t element_size, ArenaPlacement at)
    : rows_(p.sequences), max_len_(max_len), paged_(true), blocks_(p.blocks), block_positions_(p.block_positions),
      n_heads_(s.n_heads), n_kv_heads_(s.n_kv_heads), head_dim_(s.head_dim), element_size_(element_size) {
  SHARDRL_CHECK(p.block_positions > 0 && (p.block_positions & (p.block_positions - 1)) == 0,
                fmt::format("KV cache blocks of {} positions: a power of two is needed", p.block_positions));
  SHARDRL_CHECK(p.blocks >= 1 && p.sequences >= 1, "a paged KV cache needs blocks and sequences");
  while ((1 << block_shift_) < block_positions_) ++block_shift_;
  blocks_per_sequence_ = (max_len + block_positions_ - 1) / block_positions_;
  const std::size_t bytes = std::size_t(p.blocks) * block_positions_ * s.n_kv_heads * s.head_dim * element_size;
  for (int l = 0; l < s.n_layers; ++l) {
    k_.emplace_back(at, MemoryCategory::kv_cache, "kv_cache_k", bytes);
    v_.emplace_back(at, MemoryCategory::kv_cache, "kv_cache_v", bytes);
  }
  const std::size_t entries = std::size_t(p.sequences) * blocks_per_sequence_;
  table_ = LedgerView<std::int32_t>(at, MemoryCategory::kv_cache, "kv_block_table", entries);
  table_h_.assign(entries, 0);
  copies_ = LedgerView<std::int32_t>(at, MemoryCategory::kv_cache, "kv_block_copies", 2 * std::size_t(p.sequences));
  allocate_decode_split(at);
}

void KvCache::allocate_decode_split(ArenaPlacement at) {
  // The compute type is bf16 or float, told apart by its size. The sizes take the shape alone
  // (not step_shape: an arena's buffers have no address before the arena is allocated).
  const kernels::CacheShape cs{rows_, max_len_, n_heads_, n_kv_heads_, head_dim_};
  const kernels::DecodeSplitSizes n =
      element_size_ == sizeof(bf16) ? kernels::attention_decode_split_sizes<bf16>(cs) : kernels::DecodeSplitSizes{};
  if (n.partials == 0) return;
  split_partials_ = LedgerView<float>(at, MemoryCategory::workspace, "decode_split_partials", n.partials);
  // Kokkos zero-fills a view it allocates: the counters start at zero.
  split_arrivals_ = LedgerView<std::uint32_t>(MemoryCategory::workspace, "decode_split_arrivals", n.arrivals);
}

std::size_t KvCache::bytes() const {
  std::size_t total = 0;
  for (std::size_t l = 0; l < k_.size(); ++l) total += k_[l].size() + v_[l].size();
  return total;
}

kernels::CacheShape KvCache::step_shape(int rows) const {
  kernels::CacheShape cs{rows, max_len_, n_heads_, n_kv_heads_, head_dim_};
  if (paged_) {
    cs.block_table = table_.data();
    cs.blocks_per_sequence = blocks_per_sequence_;
    cs.block_shift = block_shift_;
  }
  return cs;
}

void KvCache::upload_table(const ExecSpace& space) {
  SHARDRL_CHECK(paged_, "a contiguous KV cache has no block table");
  Kokkos::deep_copy(space, table_.view(),
                    Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        table_h_.data(), table_h_.size()));
}

namespace {

// Every (from, to) pair's block of one layer's pool, copied in words of type Word.
template <class Word>
void copy_pool_blocks(const ExecSpace& space, char* pool, const std::int32_t* pairs, int n, std::size_t block_bytes) {
  const long words = static_cast<long>(block_bytes / sizeof(Word));
  Word* w = reinterpret_cast<Word*>(pool);
  Kokkos::parallel_for(
      "kv_cache_copy_blocks", Kokkos::RangePolicy<ExecSpace>(space, 0, long(n) * words), KOKKOS_LAMBDA(const long i) {
        const long c = i / words, at = i % words;
        w[long(pairs[2 * c + 1]) * words + at] = w[long(pairs[2 * c]) * words + at];
      });
}

}  // namespace

void KvCache::copy_blocks(const ExecSpace& space, const std::vector<BlockCopy>& copies) {
  SHARDRL_CHECK(paged_, "a contiguous KV cache has no blocks to copy");
  SHARDRL_CHECK(copies.size() <= std::size_t(rows_),
                fmt::format("{} KV cache block copies at once (at most {})", copies.size(), rows_));
  if (copies.empty()) return;
  std::vector<std::int32_t> pairs;
  std::vector<char> role(static_cast<std::size_t>(blocks_), 0);   // 1: a source, 2: a target
  for (const BlockCopy& c : copies) {
    SHARDRL_CHECK(c.from >= 0 && c.from < blocks_ && c.to >= 0 && c.to < blocks_ && c.from != c.to,
                  fmt::format("KV cache block copy {} -> {}", c.from, c.to));
    role[c.from] |= 1;
    pairs.push_back(c.from);
    pairs.push_back(c.to);
  }
  // One kernel copies every pair at once: a target written twice, or read as another's source,
  // would race.
  for (const BlockCopy& c : copies) {
    SHARDRL_CHECK(role[c.to] == 0, fmt::format("KV cache block copies: block {} is a target twice, or also a source",
                                              c.to));
    role[c.to] = 2;
  }
  Kokkos::deep_copy(space, Kokkos::subview(copies_.view(), std::make_pair(std::size_t(0), pairs.size())),
                    Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        pairs.data(), pairs.size()));
  const std::size_t block_bytes = std::size_t(block_positions_) * n_kv_heads_ * head_dim_ * element_size_;
  const int n = static_cast<int>(copies.size());
  for (std::size_t l = 0; l < k_.size(); ++l)
    for (const auto* pool : {&k_[l], &v_[l]}) {
      if (block_bytes % 8 == 0) copy_pool_blocks<std::uint64_t>(space, pool->data(), copies_.data(), n, block_bytes);
      else copy_pool_blocks<std::uint16_t>(space, pool->data(), copies_.data(), n, block_bytes);
    }
}

}  // namespace shardrl
