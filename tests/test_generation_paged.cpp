// The paged engine (rollout.engine = "paged"): the block pool, KV cache block copies, its
// completions against the static engine's, prefill in calls against one call, decode graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "generation_test_support.hpp"
#include "model/kv_cache.hpp"
#include "rollout/block_pool.hpp"

namespace shardrl {
namespace {

using namespace generation_test;

// Blocks go out lowest first, come back when their last reference goes, and the peak in use is
// kept; releasing a block twice is a bug the pool refuses.
TEST(BlockPool, ReferencesFreeBlocksAndPeak) {
  BlockPool pool(4);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 2);
  pool.share(1);
  EXPECT_EQ(pool.references(1), 2);
  pool.release(1);
  EXPECT_EQ(pool.free_blocks(), 1) << "block 1 still has a reference";
  pool.release(0);
  pool.release(1);
  EXPECT_EQ(pool.free_blocks(), 3);
  EXPECT_EQ(pool.take(), 0) << "lowest first, whatever the order of releases";
  EXPECT_EQ(pool.in_use(), 2);
  EXPECT_EQ(pool.peak_in_use(), 3);
}

// copy_blocks: each target block becomes its source, in every layer's keys and values; every
// other block is untouched. Blocks of 16 bytes of fp32 (8-byte words) and of 6 bytes of bf16
// (2-byte words: one position of 3 dimensions).
TEST(KvCache, CopyBlocksCopiesEveryLayerAndNothingElse) {
  for (const std::size_t element : {std::size_t(4), std::size_t(2)}) {
    ModelShape shape;
    shape.n_layers = 3;
    shape.n_heads = shape.n_kv_heads = 1;
    shape.head_dim = element == 4 ? 2 : 3;
    const int positions = element == 4 ? 2 : 1, blocks = 6;
    KvCache cache(shape, KvCache::Paged{blocks, positions, 4}, 8, element);
    const std::size_t pool_bytes = std::size_t(blocks) * positions * shape.head_dim * element;
    using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    std::vector<std::vector<char>> before;
    for (int l = 0; l < shape.n_layers; ++l)
      for (void* pool : {cache.keys(l), cache.values(l)}) {
        std::vector<char> bytes(pool_bytes);
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + l * 31 + before.size());
        Kokkos::deep_copy(Bytes(static_cast<char*>(pool), pool_bytes),
                          Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              bytes.data(), pool_bytes));
        before.push_back(bytes);
      }
    cache.copy_blocks(ExecSpace(), {{1, 4}, {0, 2}, {5, 3}});
    Kokkos::fence();
    const std::size_t block = pool_bytes / blocks;
    int pool_index = 0;
    for (int l = 0; l < shape.n_layers; ++l)
      for (void* pool : {cache.keys(l), cache.values(l)}) {
        std::vector<char> want = before[pool_index++], got(pool_bytes);
        for (const auto& [from, to] : {std::pair{1, 4}, std::pair{0, 2}, std::pair{5, 3}})
          std::copy_n(want.begin() + from * block, block, want.begin() + to * block);
        Kokkos::deep_copy(Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              got.data(), pool_bytes),
                          Bytes(static_cast<char*>(pool), pool_bytes));
        EXPECT_EQ(got, want) << "layer " << l << ", element size " << element;
      }
  }
}

TEST(KvCacheDeathTest, OverlappingBlockCopiesAreRefused) {
  ModelShape shape;
  shape.n_layers = 1;
  shape.n_heads = shape.n_kv_heads = 1;
  shape.head_dim = 2;
  KvCache cache(shape, KvCache::Paged{4, 2, 2}, 4, 4);
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{1, 1}}), "KV cache block copy 1 -> 1");
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{0, 1}, {1, 2}, {2, 3}}), "3 KV cache block copies at once");
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{0, 1}, {1, 2}}), "block 1 is a target twice, or also a source");
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{0, 2}, {1, 2}}), "block 2 is a target twice, or also a source");
}

TEST(BlockPoolDeathTest, ReleasingAFreeBlockIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockPool pool(2);
        pool.release(pool.take());
        pool.release(0);
      },
      "not in use");
}

// Four prompts (1 to 19 tokens, so blocks of 4 positions are full, partly filled or absent) of
// four samples each: 16 rows.
std::vector<GenerationRow> sampled_rows() {
  const std::vector<std::vector<std::int32_t>> prompts = {
      {10, 20, 30, 40, 50}, {7}, {1, 2, 3}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}};
  std::vector<GenerationRow> rows;
  for (std::size_t p = 0; p < prompts.size(); ++p)
    for (int g = 0; g < 4; ++g) rows.push_back(GenerationRow{prompts[p], static_cast<std::int64_t>(200 + p), g});
  return rows;
}

EngineOptions paged(std::int64_t kv_cache_tokens = 0) {
  EngineOptions e;
  e.engine = RolloutEngine::paged;
  e.block_positions = 4;
  e.kv_cache_tokens = kv_cache_tokens;
  return e;
}

void expect_same_completions(const std::vector<Completion>& got, const std::vector<Completion>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].tokens, want[r].tokens) << what << " row " << r;
    EXPECT_EQ(got[r].finished, want[r].finished) << what << " row " << r;
    ASSERT_EQ(got[r].logp.size(), want[r].logp.size()) << what << " row " << r;
    for (std::size_t i = 0; i < want[r].logp.size(); ++i) {
      EXPECT_NEAR(got[r].logp[i], want[r].logp[i], 1e-5) << what << " row " << r << " token " << i;
      EXPECT_NEAR(got[r].entropy[i], want[r].entropy[i], 1e-5) << what << " row " << r << " token " << i;
    }
  }
}

// The paged engine draws what the static one draws for the same keys: with a prompt prefilled
// once for its samples (which share its full blocks and copy its last, partly filled one), with
// 16 rows through 4 decode slots (a finished row's slot goes to the next waiting row), and with
// a pool too small for the 4 slots' rows at once (rows are preempted and recomputed). Prefill
// runs each prompt's tokens once, not once per sample.
TEST(Generate, PagedEngineDrawsWhatTheStaticEngineDraws) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  Generator fixed(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace());
  auto open = fixed.generate(rig.weights, rows, sampling, 20, 9, 4, /*eos=*/-1);
  const std::int32_t eos = open[3].tokens[2];   // some rows end early, so lengths differ
  const auto want = fixed.generate(rig.weights, rows, sampling, 20, 9, 4, eos);
  std::int64_t prompt_tokens = 0, row_tokens = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    row_tokens += static_cast<std::int64_t>(rows[r].prompt.size()) - 1;
    if (r % 4 == 0) prompt_tokens += static_cast<std::int64_t>(rows[r].prompt.size()) - 1;
  }
  EXPECT_EQ(fixed.last_stats().prefill_tokens, row_tokens);

  Generator all_at_once(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace(), nullptr, paged());
  expect_same_completions(all_at_once.generate(rig.weights, rows, sampling, 20, 9, 4, eos), want, "16 slots");
  EXPECT_EQ(all_at_once.last_stats().prefill_tokens, prompt_tokens);
  EXPECT_EQ(all_at_once.last_stats().preemptions, 0);
  // Shared prompts and blocks taken as rows grow: about half the static cache here, where rows
  // each holding their prompt and every position up to their end would need three quarters.
  EXPECT_LT(all_at_once.last_stats().kv_peak_bytes, fixed.last_stats().kv_bytes * 6 / 10);

  Generator refilled(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  expect_same_completions(refilled.generate(rig.weights, rows, sampling, 20, 9, 4, eos), want, "4 slots");
  EXPECT_EQ(refilled.last_stats().prefill_tokens, prompt_tokens);
  std::int64_t drawn = 0;
  for (const auto& c : want) drawn += static_cast<std::int64_t>(c.tokens.size());
  EXPECT_EQ(refilled.last_stats().decode_row_steps, drawn);

  // The smallest pool: one sequence of 40 positions and a prompt's, in blocks of 4.
  Generator small(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged(1));
  expect_same_completions(small.generate(rig.weights, rows, sampling, 20, 9, 4, eos), want, "small pool");
  EXPECT_GT(small.last_stats().preemptions, 0);
  // 21 blocks and the scratch block, of 4 positions, against 16 rows of 40 positions.
  EXPECT_EQ(small.last_stats().kv_bytes * (16 * 40), fixed.last_stats().kv_bytes * (22 * 4));
}

// Edges of the paged engine's block sharing, against the static engine: a prompt whose prefix
// fills two blocks exactly (nothing to copy), one whose prefix leaves its last block partly
// filled and whose last sample to join (the one that takes that block over) stops at its first
// token, and one of a single token (no prefix at all); completions of one token, and rows of
// their own limits; through 2 slots, and through the smallest pool (rows preempted and
// recomputed).
TEST(Generate, PagedEngineEdgesDrawWhatTheStaticEngineDraws) {
  GenerationRig rig;
  const std::vector<std::vector<std::int32_t>> prompts = {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {4, 5, 6}, {8}};
  std::vector<GenerationRow> rows;
  for (std::size_t p = 0; p < prompts.size(); ++p)
    for (int g = 0; g < 3; ++g) rows.push_back(GenerationRow{prompts[p], static_cast<std::int64_t>(300 + p), g});
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  Generator fixed(opts(rig.s, Precision::fp32, 9, 1), 9, 40, ExecSpace());
  const auto open = fixed.generate(rig.weights, rows, sampling, 20, 9, 4, /*eos=*/-1);
  const std::int32_t eos = open[5].tokens[0];   // the partly filled prompt's last sample ends at once
  // Rows of their own limits (GenerationRow::max_new_tokens), below the call's.
  rows[1].max_new_tokens = 2;
  rows[7].max_new_tokens = 3;
  for (const int max_new : {1, 20}) {
    const auto want = fixed.generate(rig.weights, rows, sampling, max_new, 9, 4, eos);
    ASSERT_EQ(want[5].tokens.size(), 1u);
    EXPECT_LE(want[1].tokens.size(), 2u);
    EXPECT_LE(want[7].tokens.size(), 3u);
    for (const std::int64_t pool : {std::int64_t{0}, std::int64_t{1}}) {
      Generator refilled(opts(rig.s, Precision::fp32, 2, 1), 2, 40, ExecSpace(), nullptr, paged(pool));
      expect_same_completions(refilled.generate(rig.weights, rows, sampling, max_new, 9, 4, eos), want,
                              "max_new_tokens " + std::to_string(max_new) + (pool ? ", smallest pool" : ""));
    }
  }
}

// Several end ids (the model's generation_config.json lists, rollout/stop_ids.hpp): each row's
// completion is the run without any end id cut right after its first token that is one of
// them (the draws depend on the keys, not on when rows leave), finished there, with both
// engines (the paged one refilling 4 slots).
TEST(Generate, ACompletionEndsAtAnyOfItsStopIds) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  Generator fixed(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace());
  const auto open = fixed.generate(rig.weights, rows, sampling, 20, 9, 4, /*eos=*/-1);
  const StopIds stop(open[3].tokens[2], {open[9].tokens[1], open[3].tokens[2], -1, 1 << 20}, rig.s.vocab_size);
  ASSERT_EQ(stop.ids().size(), open[3].tokens[2] == open[9].tokens[1] ? 1u : 2u) << "each id once, none past the vocabulary";
  std::vector<Completion> want = open;
  int cut_by_other = 0;
  for (Completion& c : want) {
    const auto end = std::find_if(c.tokens.begin(), c.tokens.end(), [&](std::int32_t t) { return stop.contains(t); });
    c.finished = end != c.tokens.end();
    if (c.finished && *end != stop.end_id()) ++cut_by_other;
    const std::size_t n = c.finished ? static_cast<std::size_t>(end - c.tokens.begin()) + 1 : c.tokens.size();
    c.tokens.resize(n);
    c.logp.resize(n);
    c.entropy.resize(n);
  }
  EXPECT_GT(cut_by_other, 0) << "no row ended at the second id: the test proves little";
  expect_same_completions(fixed.generate(rig.weights, rows, sampling, 20, 9, 4, stop), want, "static");
  Generator refilled(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  expect_same_completions(refilled.generate(rig.weights, rows, sampling, 20, 9, 4, stop), want, "paged, 4 slots");
}

// rollout.prefill_tokens: prefills in calls of a few rows draw what one call of every row
// draws, with both engines (the static one's 16 rows in calls of 3 rows, 120 positions; the paged
// one's 4 prompts admitted together in calls of 1 row), with the same prefill counts; and the
// decoder's activations hold one call's tokens, not every row's.
TEST(Generate, PrefillInCallsDrawsWhatOneCallDraws) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  for (const RolloutEngine engine : {RolloutEngine::static_batch, RolloutEngine::paged}) {
    const std::string what = engine == RolloutEngine::paged ? "paged" : "static";
    EngineOptions whole = paged();
    whole.engine = engine;
    EngineOptions calls = whole;
    calls.prefill_tokens = engine == RolloutEngine::paged ? 40 : 120;
    Generator one(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace(), nullptr, whole);
    Generator several(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace(), nullptr, calls);
    EXPECT_EQ(one.model().tokens_per_forward(), 16u * 40) << what;
    EXPECT_EQ(several.model().tokens_per_forward(), engine == RolloutEngine::paged ? 40u : 120u) << what;
    EXPECT_LT(several.model().activation_bytes(), one.model().activation_bytes() / 4) << what;
    const auto want = one.generate(rig.weights, rows, sampling, 20, 9, 4, /*eos=*/17);
    expect_same_completions(several.generate(rig.weights, rows, sampling, 20, 9, 4, 17), want, what);
    EXPECT_EQ(several.last_stats().prefill_tokens, one.last_stats().prefill_tokens) << what;
  }
}

// Decode graphs with the paged engine: the block table is read from the same device buffer by
// every replay, rewritten between steps; the draws are the eager engine's.
TEST(Generate, PagedEngineDecodeGraphsDrawWhatEagerDecodingDraws) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  Generator eager(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  const auto want = eager.generate(rig.weights, rows, sampling, 10, 11, 2, /*eos=*/17);
  Generator graphed(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  graphed.use_decode_graphs(!CapturedGraph::native());
  for (int call = 0; call < 2; ++call)
    expect_same_completions(graphed.generate(rig.weights, rows, sampling, 10, 11, 2, 17), want,
                            "call " + std::to_string(call));
  EXPECT_GE(graphed.decode_graph_captures(), 1);
}

}  // namespace
}  // namespace shardrl
