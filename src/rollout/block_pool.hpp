// The KV cache blocks of the paged rollout engine, on the host: which are free, and how many
// sequences reference each (a prompt's blocks are shared by its samples). A block returns to the
// free list when its last reference goes. Blocks are handed out lowest number first, so a run's
// block numbers, and what a test sees, do not depend on the order of earlier releases.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace shardrl {

class BlockPool {
 public:
  explicit BlockPool(int blocks);
  int blocks() const { return static_cast<int>(refs_.size()); }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int in_use() const { return blocks() - free_blocks(); }
  int peak_in_use() const { return peak_; }

  int take();                 // a free block with one reference; the caller checks free_blocks() first
  void share(int block);      // one more reference to a block in use
  void release(int block);    // one reference less; free at none
  int references(int block) const { return refs_.at(static_cast<std::size_t>(block)); }

 private:
  std::vector<int> refs_;
  std::set<int> free_;
  int peak_ = 0;
};

}  // namespace shardrl
