// The paged engine of Generator (rollout.engine = "paged"): its scheduler of decode slots, KV cache
// blocks and shared prompt prefills. The decode step itself is Generator::decode, shared with the
// static engine (generator.cpp).
#include "rollout/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <set>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "rollout/block_pool.hpp"
#include "rollout/row_limit.hpp"

namespace shardrl {

// The paged engine. Its state on the host: the pool's blocks with their references; each row's
// blocks (one reference each, in position order); each prompt group's prefix blocks, held until
// its last sample has joined; the rows waiting (in row order, a preempted row back at the front)
// and those decoding, each in a slot whose block-table row lists its blocks (unused entries and
// free slots: the scratch block 0).
std::vector<Completion> Generator::generate_paged(const std::vector<const void*>& weights,
                                                  const std::vector<GenerationRow>& rows,
                                                  const SamplingOptions& sampling, int max_new_tokens,
                                                  std::uint64_t seed, std::int64_t iteration, const StopIds& stop) {
  const int R = static_cast<int>(rows.size());
  std::vector<Completion> out(R);
  if (max_new_tokens == 0 || (R == 0 && !lockstep())) return out;
  const int bp = cache_.block_positions();
  const std::size_t block_bytes = cache_.bytes() / std::size_t(cache_.blocks());
  auto blocks_for = [bp](int positions) { return (positions + bp - 1) / bp; };

  BlockPool pool(cache_.blocks());
  SHARDRL_CHECK(pool.take() == kScratchBlock, "the pool hands out block 0 first");
  for (int s = 0; s < cache_.rows(); ++s) set_table(s, {});

  // Samples of one prompt (same index, same tokens) form a group that shares its prefill.
  struct Group {
    int first_row = 0;
    int prefix = 0;            // prompt tokens through prefill (the last one is fed by decode)
    int waiting = 0;           // its rows not yet joined
    bool prefilled = false;
    std::vector<int> blocks;   // its prefix's, one reference held by the group until waiting == 0
  };
  std::vector<Group> groups;
  std::vector<int> group_of(R);
  for (int r = 0; r < R; ++r) {
    int g = static_cast<int>(groups.size()) - 1;
    if (g < 0 || rows[groups[g].first_row].prompt_index != rows[r].prompt_index ||
        rows[groups[g].first_row].prompt != rows[r].prompt) {
      groups.push_back(Group{r, static_cast<int>(rows[r].prompt.size()) - 1, 0, false, {}});
      g = static_cast<int>(groups.size()) - 1;
    }
    ++groups[g].waiting;
    group_of[r] = g;
  }

  std::vector<std::vector<int>> blocks_of(R);
  std::vector<int> slot_of(R, -1);
  std::vector<char> joined(R, 0);   // attached to its group's prefix (or prefilled alone)
  std::set<int> free_slots;
  for (int s = 0; s < max_rows_; ++s) free_slots.insert(s);
  std::deque<int> waiting;
  for (int r = 0; r < R; ++r) waiting.push_back(r);
  std::vector<int> running;   // in the order they were admitted
  auto position_of = [&](int r) {
    return static_cast<int>(rows[r].prompt.size()) - 1 + static_cast<int>(out[r].tokens.size());
  };
  auto release_row = [&](int r) {
    for (int b : blocks_of[r]) pool.release(b);
    blocks_of[r].clear();
    set_table(slot_of[r], {});
    free_slots.insert(slot_of[r]);
    slot_of[r] = -1;
  };
  // In lockstep (expert-parallel decoding) a rank with nothing left goes on with padding forwards
  // (into the scratch block) while another rank has rows.
  while (true) {
    // Admit waiting rows into free slots while the pool has room for what each needs now (its
    // group's prefix if not yet prefilled, or its own prefix if prefilled alone) and for the block
    // it takes later in this step (its copy of the prompt's last block, or the block of the
    // position it decodes next), beside the blocks the running rows take in this step.
    std::vector<int> prefill_groups, prefill_rows, joining;
    int promised = 0;   // blocks taken later in this step
    for (int r : running) promised += static_cast<int>(blocks_of[r].size()) <= position_of(r) / bp ? 1 : 0;
    while (!free_slots.empty() && !waiting.empty()) {
      const int r = waiting.front();
      Group& g = groups[group_of[r]];
      // A row that has not joined its group shares its prompt's prefill (the group holds its
      // prefix until its last row joins, and marks it prefilled when its first row is admitted);
      // a joined row that comes back after preemption is prefilled alone.
      const bool share = !joined[r];
      // A sharing row takes one block later (the copy of a partly filled last block, or the block
      // its first position opens); a row prefilled alone one only when its position opens a block.
      const int later = share ? 1 : (position_of(r) % bp == 0 ? 1 : 0);
      int need = later;
      if (share && !g.prefilled) need += blocks_for(g.prefix);
      if (!share) need += blocks_for(position_of(r));
      if (pool.free_blocks() - promised < need) break;
      promised += later;
      waiting.pop_front();
      slot_of[r] = *free_slots.begin();
      free_slots.erase(free_slots.begin());
      running.push_back(r);
      if (share) {
        if (!g.prefilled) {
          for (int b = 0; b < blocks_for(g.prefix); ++b) g.blocks.push_back(pool.take());
          if (g.prefix > 0) prefill_groups.push_back(group_of[r]);
          g.prefilled = true;
        }
        joining.push_back(r);
      } else {
        for (int b = 0; b < blocks_for(position_of(r)); ++b) blocks_of[r].push_back(pool.take());
        if (position_of(r) > 0) prefill_rows.push_back(r);
        joined[r] = 1;
      }
    }
    SHARDRL_CHECK(!running.empty() || waiting.empty(),
                  "the paged KV cache cannot hold one sequence (the generator sizes it to)");
    if (!take_step(!running.empty())) break;

    // Prefill what was admitted: each group's prompt once, each row prefilled alone with its
    // prompt and what it generated before it was preempted (all but the last token, which
    // decode feeds), through the prefill sequences.
    std::vector<std::vector<std::int32_t>> texts;
    std::vector<const std::vector<int>*> blocks;
    for (int gi : prefill_groups) {
      const auto& p = rows[groups[gi].first_row].prompt;
      texts.emplace_back(p.begin(), p.end() - 1);
      blocks.push_back(&groups[gi].blocks);
    }
    for (int r : prefill_rows) {
      std::vector<std::int32_t> text(rows[r].prompt);
      text.insert(text.end(), out[r].tokens.begin(), out[r].tokens.end());
      text.pop_back();
      texts.push_back(std::move(text));
      blocks.push_back(&blocks_of[r]);
    }
    for (const auto& t : texts) stats_.prefill_tokens += static_cast<std::int64_t>(t.size());
    if (!texts.empty() || lockstep()) prefill(weights, texts, &blocks, max_rows_);

    // Joining samples take references to their prompt's full blocks and copy its last, partly
    // filled one (their own positions follow in it); the group's last sample takes that block
    // over instead, and the group lets its prefix go. The copies run together after the loop:
    // a source is held by its group until the group's last sample (which shares it, not
    // copies it), so no target of this step is also a source.
    std::vector<KvCache::BlockCopy> copies;
    for (int r : joining) {
      Group& g = groups[group_of[r]];
      const int full = g.prefix / bp;
      const bool last = --g.waiting == 0;
      for (int b = 0; b < full; ++b) {
        pool.share(g.blocks[b]);
        blocks_of[r].push_back(g.blocks[b]);
      }
      if (g.prefix % bp != 0) {
        if (last) {
          pool.share(g.blocks[full]);
          blocks_of[r].push_back(g.blocks[full]);
        } else {
          const int own = pool.take();
          copies.push_back({g.blocks[full], own});
          blocks_of[r].push_back(own);
        }
      }
      joined[r] = 1;
      if (last) {
        for (int b : g.blocks) pool.release(b);
        g.blocks.clear();
      }
    }
    cache_.copy_blocks(model_.space(), copies);

    // Every decoding row needs the block of the position it writes now. Without a free one, the
    // row admitted last is preempted (its blocks freed; it waits at the front and is recomputed
    // when it comes back: its draws are keyed, so it continues with the same tokens, to the
    // rounding of a prefill against decode steps, which on a GPU can change a near tie).
    for (std::size_t i = 0; i < running.size();) {
      const int r = running[i];
      const int need = position_of(r) / bp + 1;
      bool preempted_self = false;
      while (static_cast<int>(blocks_of[r].size()) < need) {
        if (pool.free_blocks() == 0) {
          const int victim = running.back();
          release_row(victim);
          running.pop_back();
          waiting.push_front(victim);
          ++stats_.preemptions;
          if (victim == r) {
            preempted_self = true;
            break;
          }
          continue;
        }
        blocks_of[r].push_back(pool.take());
      }
      if (!preempted_self) ++i;
    }
    for (int r : running) set_table(slot_of[r], blocks_of[r]);
    cache_.upload_table(model_.space());

    std::vector<std::int32_t> input, position, slot;
    std::vector<std::uint64_t> key;
    for (int r : running) {
      input.push_back(out[r].tokens.empty() ? rows[r].prompt.back() : out[r].tokens.back());
      position.push_back(position_of(r));
      slot.push_back(slot_of[r]);
      key.push_back(draw_key(seed, iteration, rows[r].prompt_index, rows[r].sample_index,
                             static_cast<std::int64_t>(out[r].tokens.size())));
    }
    decode(weights, sampling, input, position, slot, key);
    std::vector<int> still;
    for (std::size_t i = 0; i < running.size(); ++i) {
      const int r = running[i];
      Completion& c = out[r];
      SHARDRL_CHECK(drawn_h_[i] >= 0, "the model's logits were all NaN (it diverged): the sampler drew no token");
      c.tokens.push_back(drawn_h_[i]);
      c.logp.push_back(logp_h_[i]);
      c.entropy.push_back(entropy_h_[i]);
      c.finished = stop.contains(drawn_h_[i]);
      if (!c.finished && static_cast<int>(c.tokens.size()) < row_token_limit(rows[r], max_new_tokens)) still.push_back(r);
      else release_row(r);
    }
    running.swap(still);
  }
  stats_.kv_peak_bytes = std::size_t(pool.peak_in_use() - 1) * block_bytes;   // the scratch block aside
  return out;
}

}  // namespace shardrl
