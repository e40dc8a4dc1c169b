// Decode attention and the KV-cache write against an fp64 host reference: float and bf16, GQA,
// rows at different positions, outputs poisoned first; the model's head dims (64, 128) over
// contiguous and paged caches, where GPU builds take the CUDA kernel (compared with the portable
// one there too); long caches split over their positions (flash-decoding) on GPU builds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "decode_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/attention_decode.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::decode_reference;
using test::device_ints;
using test::expect_close;
using test::random_buffer;
using test::unit_roundoff;

// attention_decode of bf16 rows into a poisoned output, read back to the host.
std::vector<double> decoded(const kernels::CacheShape& s, const std::int32_t* slots, const std::int32_t* positions,
                            const bf16* q, const bf16* k_cache, const bf16* v_cache,
                            const kernels::DecodeSplitWorkspace& split) {
  Buffer<bf16> out(long(s.rows) * s.n_heads * s.hd);
  out.poison();
  kernels::attention_decode(ExecSpace(), s, slots, positions, q, k_cache, v_cache, out.data(), split);
  return out.host();
}

template <class T>
class AttentionDecode : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(AttentionDecode, Types);

TYPED_TEST(AttentionDecode, CacheWriteAndAttentionMatchTheReference) {
  using T = TypeParam;
  struct Shape { int R, L, H, G, hd; };
  for (const Shape& sh : {Shape{1, 1, 1, 1, 8}, Shape{3, 9, 4, 2, 16}, Shape{5, 17, 6, 3, 64}, Shape{2, 33, 4, 4, 8}}) {
    kernels::CacheShape s{sh.R, sh.L, sh.H, sh.G, sh.hd};
    const long q_n = long(sh.R) * sh.H * sh.hd, kv_n = long(sh.R) * sh.G * sh.hd, cache_n = long(sh.R) * sh.L * sh.G * sh.hd;
    std::vector<double> q, k, v, kc, vc;
    auto qb = random_buffer<T>(q_n, 1, &q), kb = random_buffer<T>(kv_n, 2, &k), vb = random_buffer<T>(kv_n, 3, &v);
    auto kcb = random_buffer<T>(cache_n, 4, &kc), vcb = random_buffer<T>(cache_n, 5, &vc);
    std::mt19937 gen(sh.L);
    std::vector<std::int32_t> pos(sh.R);
    for (auto& p : pos) p = std::uniform_int_distribution<int>(0, sh.L - 1)(gen);
    Kokkos::View<std::int32_t*, MemSpace> posd("pos", sh.R);
    auto ph = Kokkos::create_mirror_view(posd);
    for (int r = 0; r < sh.R; ++r) ph(r) = pos[r];
    Kokkos::deep_copy(posd, ph);

    kernels::kv_cache_write(ExecSpace(), s, nullptr, posd.data(), kb.data(), vb.data(), kcb.data(), vcb.data());
    // The new key and value land at (r, pos[r]); every other cache entry is unchanged (exact).
    for (int r = 0; r < sh.R; ++r)
      for (int i = 0; i < sh.G * sh.hd; ++i) {
        const long at = (long(r) * sh.L + pos[r]) * sh.G * sh.hd + i;
        kc[at] = k[long(r) * sh.G * sh.hd + i];
        vc[at] = v[long(r) * sh.G * sh.hd + i];
      }
    expect_close(kcb.host(), kc, 0, 0, "k cache");
    expect_close(vcb.host(), vc, 0, 0, "v cache");

    Buffer<T> out(q_n);
    out.poison();
    kernels::attention_decode(ExecSpace(), s, nullptr, posd.data(), qb.data(), kcb.data(), vcb.data(), out.data());
    std::vector<int> rows(sh.R);
    std::iota(rows.begin(), rows.end(), 0);
    const std::vector<int> pos_i(pos.begin(), pos.end());
    const std::vector<double> want =
        decode_reference(s, rows, pos_i, q, kc, vc, [&](long seq, long j) { return seq * sh.L + j; });
    // bf16: the result is rounded once to T (1 ulp) over fp32 arithmetic; fp32: dot products of
    // up to 64 terms and sums over up to 33 positions (64 ulp of the largest value).
    expect_close(out.host(), want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), "attention_decode");
  }
}

// Rows addressing cache slots out of order (what the generator does once sequences finish):
// the same results as the rows in slot order.
TYPED_TEST(AttentionDecode, SlotsSelectTheCacheRows) {
  using T = TypeParam;
  kernels::CacheShape full{4, 7, 4, 2, 16};
  const long cache_n = 4L * 7 * 2 * 16, q_n = 4L * 4 * 16, kv_n = 4L * 2 * 16;
  auto kc = random_buffer<T>(cache_n, 1), vc = random_buffer<T>(cache_n, 2);
  auto q = random_buffer<T>(q_n, 3), k = random_buffer<T>(kv_n, 4), v = random_buffer<T>(kv_n, 5);
  Kokkos::View<std::int32_t*, MemSpace> pos("pos", 4), slots("slots", 2), pos2("pos2", 2);
  auto ph = Kokkos::create_mirror_view(pos);
  for (int r = 0; r < 4; ++r) ph(r) = 2 + r;
  Kokkos::deep_copy(pos, ph);
  auto sh = Kokkos::create_mirror_view(slots);
  auto p2 = Kokkos::create_mirror_view(pos2);
  sh(0) = 3; sh(1) = 1; p2(0) = ph(3); p2(1) = ph(1);
  Kokkos::deep_copy(slots, sh);
  Kokkos::deep_copy(pos2, p2);
  Buffer<T> all(q_n), some(2L * 4 * 16);
  kernels::attention_decode(ExecSpace(), full, nullptr, pos.data(), q.data(), kc.data(), vc.data(), all.data());
  // Rows 3 and 1 of the full step, as a step of two rows addressing slots 3 and 1.
  Buffer<T> q2(2L * 4 * 16);
  {
    auto qh = q.host();
    std::vector<double> sub;
    for (int r : {3, 1}) sub.insert(sub.end(), qh.begin() + r * 64, qh.begin() + (r + 1) * 64);
    q2.set(sub);
  }
  kernels::CacheShape two{2, 7, 4, 2, 16};
  kernels::attention_decode(ExecSpace(), two, slots.data(), pos2.data(), q2.data(), kc.data(), vc.data(), some.data());
  auto a = all.host(), b = some.host();
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(b[i], a[3 * 64 + i]);
    EXPECT_EQ(b[64 + i], a[1 * 64 + i]);
  }
  // A write through slots lands in the slot's row.
  kernels::kv_cache_write(ExecSpace(), two, slots.data(), pos2.data(), k.data(), v.data(), kc.data(), vc.data());
  auto kh = kc.host(), knew = k.host();
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(kh[(3L * 7 + p2(0)) * 32 + i], knew[i]);
    EXPECT_EQ(kh[(1L * 7 + p2(1)) * 32 + i], knew[32 + i]);
  }
}

// The shapes the model decodes with: head dims 64 and 128, GQA groups 1 to 16 (the CUDA kernel
// takes 4, 2 or 1 query heads per CTA), contexts from 1 to past several of its tiles with
// ragged ends, rows through slots, and a paged cache whose first blocks two sequences share (a
// prompt's samples). attention_decode (on GPU builds the CUDA kernel, for bf16) and the portable
// kernel, each against fp64 to the same tolerance (same math, other summation orders).
TEST(AttentionDecodeModelShapes, ContiguousAndPagedCachesMatchTheReference) {
  using T = bf16;
  struct Shape { int H, G, hd; };
  for (const Shape& sh : {Shape{16, 8, 128}, Shape{32, 8, 64}, Shape{6, 1, 64}, Shape{12, 2, 128}, Shape{16, 1, 128},
                          Shape{4, 4, 64}}) {
    for (const bool paged : {false, true}) {
      const int R = 5, L = 700, shift = 4, bps = (L + 15) >> shift;
      const std::vector<int> pos = {0, 699, 130, 17, 64};      // contexts 1 .. 700 positions
      const std::vector<int> slot = {2, 0, 4, 1, 3};           // rows read sequences out of order
      std::vector<std::int32_t> table;
      long entries = long(R) * L;
      if (paged) {
        // Sequences 0 and 1 share their first 3 blocks; every other block is the sequence's own,
        // placed at a shuffled pool position.
        std::vector<std::int32_t> pool(R * bps);
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
        table.assign(pool.begin(), pool.end());
        for (int b = 0; b < 3; ++b) table[bps + b] = table[b];
        entries = long(R) * bps << shift;
      }
      kernels::CacheShape s{R, L, sh.H, sh.G, sh.hd};
      Kokkos::View<std::int32_t*, MemSpace> table_d("table", table.size());
      if (paged) {
        auto th = Kokkos::create_mirror_view(table_d);
        for (std::size_t i = 0; i < table.size(); ++i) th(i) = table[i];
        Kokkos::deep_copy(table_d, th);
        s.block_table = table_d.data();
        s.blocks_per_sequence = bps;
        s.block_shift = shift;
      }
      kernels::CacheShape host_shape = s;
      host_shape.block_table = paged ? table.data() : nullptr;
      const auto entry = [&](long seq, long j) { return host_shape.entry(seq, j); };
      const long q_n = long(R) * sh.H * sh.hd, cache_n = entries * sh.G * sh.hd;
      std::vector<double> q, kc, vc;
      auto qb = random_buffer<T>(q_n, 11, &q, -2.0, 2.0);
      auto kcb = random_buffer<T>(cache_n, 12, &kc), vcb = random_buffer<T>(cache_n, 13, &vc);
      Kokkos::View<std::int32_t*, MemSpace> pos_d("pos", R), slot_d("slot", R);
      auto ph = Kokkos::create_mirror_view(pos_d);
      auto sl = Kokkos::create_mirror_view(slot_d);
      for (int r = 0; r < R; ++r) {
        ph(r) = pos[r];
        sl(r) = slot[r];
      }
      Kokkos::deep_copy(pos_d, ph);
      Kokkos::deep_copy(slot_d, sl);
      const std::string what = fmt::format("H {} G {} hd {} {}", sh.H, sh.G, sh.hd, paged ? "paged" : "contiguous");
      const std::vector<double> want = decode_reference(s, slot, pos, q, kc, vc, entry);
      Buffer<T> out(q_n), portable(q_n);
      out.poison();
      portable.poison();
      kernels::attention_decode(ExecSpace(), s, slot_d.data(), pos_d.data(), qb.data(), kcb.data(), vcb.data(),
                                out.data());
      kernels::attention_decode_portable(ExecSpace(), s, slot_d.data(), pos_d.data(), qb.data(), kcb.data(),
                                         vcb.data(), portable.data());
      // One bf16 rounding of an fp32 result (sums over up to 700 positions of 128-term dots).
      expect_close(out.host(), want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what);
      expect_close(portable.host(), want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what + " portable");
    }
  }
}

// Long caches: on GPU builds, with the split workspace, steps of up to kDecodeSplitMaxRows rows
// run each row's positions in ranges (kDecodeSplitPositions, or kDecodeFewRowsSplitPositions in
// steps of up to kDecodeFewRows rows, doubled past kDecodeSplitMaxRanges of them) merged by the
// CTA that finishes the last one. Rows ending just before, at and past a
// range's end and where the ranges double, and rows of more ranges than the launch has CTAs per
// row (a CTA then takes several); sequences of a paged cache sharing one sequence's blocks keep
// the cache small. Checked: against fp64 and the portable kernel; the same bits on a second
// launch (deterministic merge, counters back at zero); a row's bits the same in any step of its
// row class (up to kDecodeFewRows rows, whose ranges are finer, or more); a row of one range, and
// every row of a step past the row threshold, bit for bit the unsplit kernel's.
TEST(AttentionDecodeModelShapes, LongCachesSplitOverPositionsMatchTheReference) {
  using T = bf16;
  struct Shape { int H, G, hd; };
  for (const Shape& sh : {Shape{16, 8, 128}, Shape{32, 8, 64}, Shape{12, 2, 128}, Shape{6, 1, 64}}) {
    const int R = kernels::kDecodeSplitMaxRows + 1, L = 9000, shift = 5, bps = (L + 31) >> shift;
    const int R_split = R - 1;   // the first R - 1 rows are a step that splits
    std::vector<int> pos(R), slot(R);
    const std::vector<int> edges = {0, 255, 256, 257, 511, 767, 1000, 2047, 8190, 8191, 8192, 8999};
    for (int r = 0; r < R; ++r) {
      pos[r] = r < int(edges.size()) ? edges[r] : 4095 - 337 * (r - int(edges.size()));
      slot[r] = (r * 7) % R;
    }
    // Every sequence's table names the same blocks, shuffled once.
    std::vector<std::int32_t> blocks(bps), table(std::size_t(R) * bps);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(3));
    for (int q = 0; q < R; ++q) std::copy(blocks.begin(), blocks.end(), table.begin() + std::size_t(q) * bps);
    const auto table_d = device_ints(table);
    const kernels::CacheShape s_all{R, L, sh.H, sh.G, sh.hd, table_d.data(), bps, shift};
    kernels::CacheShape s = s_all;
    s.rows = R_split;
    kernels::CacheShape host_shape = s;
    host_shape.block_table = table.data();
    const long per_row = long(sh.H) * sh.hd, cache_n = (long(bps) << shift) * sh.G * sh.hd;
    std::vector<double> q, kc, vc;
    auto qb = random_buffer<T>(R * per_row, 21, &q, -2.0, 2.0);
    auto kcb = random_buffer<T>(cache_n, 22, &kc), vcb = random_buffer<T>(cache_n, 23, &vc);
    auto pos_d = device_ints(pos), slot_d = device_ints(slot);
    const std::string what = fmt::format("H {} G {} hd {}", sh.H, sh.G, sh.hd);

    const kernels::DecodeSplitSizes sizes = kernels::attention_decode_split_sizes<T>(s_all);
    const std::size_t counters = sizes.arrivals;
    Kokkos::View<float*, MemSpace> partials("partials", sizes.partials);
    Kokkos::View<std::uint32_t*, MemSpace> arrivals("arrivals", counters);
    const kernels::DecodeSplitWorkspace split{partials.data(), arrivals.data()};
    const auto decode = [&](const kernels::CacheShape& shape, const std::int32_t* slots, const std::int32_t* positions,
                            const T* qs, const kernels::DecodeSplitWorkspace& ws) {
      return decoded(shape, slots, positions, qs, kcb.data(), vcb.data(), ws);
    };
    const std::vector<double> got = decode(s, slot_d.data(), pos_d.data(), qb.data(), split);
    const std::vector<double> want =
        decode_reference(s, slot, pos, q, kc, vc, [&](long seq, long j) { return host_shape.entry(seq, j); });
    expect_close(got, want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what);
    Buffer<T> portable(R_split * per_row);
    kernels::attention_decode_portable(ExecSpace(), s, slot_d.data(), pos_d.data(), qb.data(), kcb.data(), vcb.data(),
                                       portable.data());
    expect_close(got, portable.host(), 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what + " vs portable");

    EXPECT_EQ(decode(s, slot_d.data(), pos_d.data(), qb.data(), split), got) << what << ": a second launch";
    auto arrived = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), arrivals);
    for (std::size_t i = 0; i < counters; ++i) ASSERT_EQ(arrived(i), 0u) << what << ": counter " << i;

    const std::vector<double> unsplit = decode(s, slot_d.data(), pos_d.data(), qb.data(), {});
    // The rows `which` as a step of their own (their queries, positions and slots gathered), and
    // row i of a step's output.
    const auto step_of = [&](const std::vector<int>& which) {
      std::vector<double> qs;
      std::vector<int> ps, ss;
      for (const int r : which) {
        qs.insert(qs.end(), q.begin() + r * per_row, q.begin() + (r + 1) * per_row);
        ps.push_back(pos[r]);
        ss.push_back(slot[r]);
      }
      Buffer<T> qd(long(which.size()) * per_row);
      qd.set(qs);
      const auto pd = device_ints(ps), sd = device_ints(ss);
      kernels::CacheShape shape = s;
      shape.rows = static_cast<int>(which.size());
      return decode(shape, sd.data(), pd.data(), qd.data(), split);
    };
    const auto row_of = [&](const std::vector<double>& out, int i) {
      return std::vector<double>(out.begin() + i * per_row, out.begin() + (i + 1) * per_row);
    };
    // Within a row class a row's bits do not depend on its step: rows 11 (18 ranges of 512), 9 (32
    // of 256), 7 (8) and 3 (2) in a step of five rows as in the step above; the same rows as a step
    // of kDecodeFewRows (ranges of 64 doubled: 11 and 9 as before, 7 in 32 of 64, 3 in 5) as each
    // alone, and against fp64.
    const std::vector<int> four = {11, 9, 7, 3};
    static_assert(kernels::kDecodeFewRows == 4, "four rows are a step of the few-row class");
    const std::vector<double> five = step_of({11, 9, 7, 3, 0}), few = step_of(four);
    for (int i = 0; i < 4; ++i) {
      const int r = four[i];
      EXPECT_TRUE(row_of(five, i) == row_of(got, r)) << what << ": row " << r << " in a step of five";
      EXPECT_TRUE(step_of({r}) == row_of(few, i)) << what << ": row " << r << " alone";
      expect_close(row_of(few, i), row_of(want, r), 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(),
                   what + ": row " + std::to_string(r) + " in a step of four");
    }
    // Where the build splits, row 3 (258 positions) runs in 5 ranges of 64 alone and in 2 of 256 in
    // a step of five: the ranges' partial results the workspace holds (row, head, range) say so (a
    // comparison of bits would not: one row's fp32 differences rarely reach a bf16 rounding).
    if (sizes.partials > 0) {
      const auto range_written = [&](const std::vector<int>& step, int range) {
        Kokkos::deep_copy(partials, std::numeric_limits<float>::quiet_NaN());
        step_of(step);
        float first = 0.0f;   // the running max of row 0's head 0 in that range
        Kokkos::deep_copy(first, Kokkos::subview(partials, std::size_t(range) * (2 + sh.hd)));
        return std::isfinite(first);
      };
      EXPECT_TRUE(range_written({3}, 4)) << what << ": row 3 alone in 5 ranges";
      EXPECT_TRUE(range_written({3, 0, 1, 2, 4}, 1)) << what << ": row 3 in a step of five, in 2 ranges";
      EXPECT_FALSE(range_written({3, 0, 1, 2, 4}, 2)) << what << ": row 3 in a step of five, in 2 ranges";
    }
    EXPECT_TRUE(step_of({1}) == row_of(unsplit, 1)) << what << ": row 1 alone, one range";
    EXPECT_TRUE(std::equal(unsplit.begin() + 1 * per_row, unsplit.begin() + 2 * per_row, got.begin() + 1 * per_row))
        << what << ": a row of one range, split and not";
    // Where the build splits (a workspace to split into), the long rows did split: their sums ran
    // in another order, so some of their bits differ from the unsplit kernel's.
    if (sizes.partials > 0) {
      EXPECT_FALSE(std::equal(unsplit.begin() + 7 * per_row, unsplit.begin() + 12 * per_row, got.begin() + 7 * per_row))
          << what << ": rows of several ranges gave the unsplit kernel's bits";
    }
    expect_close(unsplit, want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what + " unsplit");
    // A step of one row more than the threshold: the unsplit kernel, workspace or not.
    EXPECT_EQ(decode(s_all, slot_d.data(), pos_d.data(), qb.data(), split),
              decode(s_all, slot_d.data(), pos_d.data(), qb.data(), {}))
        << what << ": " << R << " rows";
  }
}

// Rows long enough for the ranges to double twice and more (past 32 x 512 = 16 384 positions: 1 024
// and 2 048), one query and KV head of 64 so the cache stays small: against fp64 and the
// unsplit kernel, and alone as in the step.
TEST(AttentionDecodeModelShapes, VeryLongCachesDoubleTheirRangesAgain) {
  using T = bf16;
  const int R = 4, L = 40000, H = 2, G = 1, hd = 64;
  const std::vector<int> pos = {16383, 16384, 32768, 39999}, slot = {0, 1, 2, 3};
  const kernels::CacheShape s{R, L, H, G, hd};
  const long per_row = long(H) * hd, cache_n = long(R) * L * G * hd;
  std::vector<double> q, kc, vc;
  auto qb = random_buffer<T>(R * per_row, 41, &q, -2.0, 2.0);
  auto kcb = random_buffer<T>(cache_n, 42, &kc), vcb = random_buffer<T>(cache_n, 43, &vc);
  const auto pos_d = device_ints(pos);
  const kernels::DecodeSplitSizes sizes = kernels::attention_decode_split_sizes<T>(s);
  Kokkos::View<float*, MemSpace> partials("partials", sizes.partials);
  Kokkos::View<std::uint32_t*, MemSpace> arrivals("arrivals", sizes.arrivals);
  const auto decode = [&](const kernels::CacheShape& shape, const std::int32_t* slots, const std::int32_t* positions,
                          const T* qs, const kernels::DecodeSplitWorkspace& ws) {
    return decoded(shape, slots, positions, qs, kcb.data(), vcb.data(), ws);
  };
  const kernels::DecodeSplitWorkspace split{partials.data(), arrivals.data()};
  const std::vector<double> got = decode(s, nullptr, pos_d.data(), qb.data(), split);
  const std::vector<double> want =
      decode_reference(s, slot, pos, q, kc, vc, [&](long seq, long j) { return seq * L + j; });
  expect_close(got, want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), "very long caches");
  expect_close(decode(s, nullptr, pos_d.data(), qb.data(), {}), want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(),
               "very long caches, unsplit");
  // The last row alone (its sequence through slots): a step of one row launches other grids,
  // the same ranges.
  const auto p1 = device_ints(std::vector<int>{pos.back()}), s1 = device_ints(std::vector<int>{R - 1});
  kernels::CacheShape one = s;
  one.rows = 1;
  const std::vector<double> alone = decode(one, s1.data(), p1.data(), qb.data() + (R - 1) * per_row, split);
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + (R - 1) * per_row)) << "the last row alone";
}

}  // namespace
}  // namespace shardrl
