#include "rollout/block_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace shardrl {

BlockPool::BlockPool(int blocks) : refs_(static_cast<std::size_t>(std::max(blocks, 0)), 0) {
  SHARDRL_CHECK(blocks >= 1, fmt::format("a block pool of {} blocks", blocks));
  for (int b = 0; b < blocks; ++b) free_.insert(free_.end(), b);
}

int BlockPool::take() {
  SHARDRL_CHECK(!free_.empty(), "no free KV cache block (the scheduler checks before it takes)");
  const int block = *free_.begin();
  free_.erase(free_.begin());
  refs_[static_cast<std::size_t>(block)] = 1;
  peak_ = std::max(peak_, in_use());
  return block;
}

void BlockPool::share(int block) {
  SHARDRL_CHECK(block >= 0 && block < blocks() && refs_[static_cast<std::size_t>(block)] > 0,
                fmt::format("sharing KV cache block {}, which is not in use", block));
  ++refs_[static_cast<std::size_t>(block)];
}

void BlockPool::release(int block) {
  SHARDRL_CHECK(block >= 0 && block < blocks() && refs_[static_cast<std::size_t>(block)] > 0,
                fmt::format("releasing KV cache block {}, which is not in use", block));
  if (--refs_[static_cast<std::size_t>(block)] == 0) free_.insert(block);
}

}  // namespace shardrl
