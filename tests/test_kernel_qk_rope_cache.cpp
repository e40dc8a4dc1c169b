// The decode step's fused head work (kernels/qk_rope_cache.hpp) against an fp64 host reference
// of norm -> rotation -> cache write, float and bf16, with and without the per-head norms, rows
// addressing cache slots out of order; and against the separate kernels it replaces
// (rmsnorm_forward, rope_forward, kv_cache_write): bit for bit without the norms, within a
// rounding with them (the sum of squares is reduced in another order). Then the head work and
// the attention in one launch (kernels/attention_decode_heads.hpp) against the two launches, and
// started early behind the product it reads.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "decode_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/attention_decode_heads.hpp"
#include "kernels/decode_gemv.hpp"
#include "kernels/qk_rope_cache.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::head_reference;
using test::device_ints;
using test::expect_close;
using test::random_buffer;
using test::unit_roundoff;

template <class T>
class QkRopeCache : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(QkRopeCache, Types);

struct Step {
  int rows = 3, max_len = 9, H = 4, G = 2, hd = 16;
  std::vector<int> slots = {2, 0, 1}, pos = {5, 0, 8};
};

TYPED_TEST(QkRopeCache, MatchesTheReference) {
  using T = TypeParam;
  const Step st;
  const float eps = 1e-6f;
  for (bool normed : {false, true}) {
    const std::string what = normed ? "with q/k norms" : "rotation only";
    kernels::CacheShape s{st.rows, st.max_len, st.H, st.G, st.hd};
    std::vector<double> q, k, v, wq, wk;
    auto qb = random_buffer<T>(long(st.rows) * st.H * st.hd, 1, &q), kb = random_buffer<T>(long(st.rows) * st.G * st.hd, 2, &k);
    auto vb = random_buffer<T>(long(st.rows) * st.G * st.hd, 3, &v);
    auto wqb = random_buffer<T>(st.hd, 4, &wq, 0.5, 1.5), wkb = random_buffer<T>(st.hd, 5, &wk, 0.5, 1.5);
    const long cache_n = long(st.rows) * st.max_len * st.G * st.hd;
    std::vector<double> kc, vc;
    auto kcb = random_buffer<T>(cache_n, 6, &kc), vcb = random_buffer<T>(cache_n, 7, &vc);
    auto slots = device_ints(st.slots), pos = device_ints(st.pos);
    Buffer<float> table(long(st.rows) * st.hd);
    kernels::rope_table(ExecSpace(), pos.data(), st.rows, st.hd, kernels::RopeFrequencies{}, table.data());
    Buffer<T> out(long(st.rows) * st.H * st.hd);
    out.poison();
    kernels::qk_rope_cache_write(ExecSpace(), s, slots.data(), pos.data(), qb.data(), kb.data(), vb.data(),
                                 normed ? wqb.data() : nullptr, normed ? wkb.data() : nullptr, eps, table.data(),
                                 out.data(), kcb.data(), vcb.data());
    std::vector<double> want_q(out.size());
    for (int r = 0; r < st.rows; ++r) {
      for (int h = 0; h < st.H; ++h) {
        const long at = (long(r) * st.H + h) * st.hd;
        const auto o = head_reference<T>(&q[at], normed ? &wq : nullptr, st.hd, st.pos[r], eps);
        std::copy(o.begin(), o.end(), want_q.begin() + at);
      }
      for (int g = 0; g < st.G; ++g) {
        const long from = (long(r) * st.G + g) * st.hd;
        const long to = ((long(st.slots[r]) * st.max_len + st.pos[r]) * st.G + g) * st.hd;
        const auto o = head_reference<T>(&k[from], normed ? &wk : nullptr, st.hd, st.pos[r], eps);
        for (int d = 0; d < st.hd; ++d) {
          kc[to + d] = o[d];
          vc[to + d] = v[from + d];
        }
      }
    }
    // One rounding of the rotation (two products and a sum in fp32: 2 ulp), and the fp32 angle's
    // error at position 8 (a few 1e-7 radians, times values up to about 2).
    const double rtol = 2 * unit_roundoff<T>(), atol = 4 * unit_roundoff<T>() + 4e-6;
    expect_close(out.host(), want_q, rtol, atol, what + ": queries");
    expect_close(kcb.host(), kc, rtol, atol, what + ": key cache (only the new entries change)");
    expect_close(vcb.host(), vc, 0, 0, what + ": value cache");
  }
}

TYPED_TEST(QkRopeCache, MatchesTheSeparateKernels) {
  using T = TypeParam;
  const Step st;
  const float eps = 1e-6f;
  kernels::CacheShape s{st.rows, st.max_len, st.H, st.G, st.hd};
  const long qn = long(st.rows) * st.H * st.hd, kn = long(st.rows) * st.G * st.hd;
  const long cache_n = long(st.rows) * st.max_len * st.G * st.hd;
  auto slots = device_ints(st.slots), pos = device_ints(st.pos);
  Buffer<float> table(long(st.rows) * st.hd);
  kernels::rope_table(ExecSpace(), pos.data(), st.rows, st.hd, kernels::RopeFrequencies{}, table.data());
  // Without norms the model rotates its queries in place (q_raw is q); rows without slots are
  // sequences 0..rows-1.
  struct Case { bool normed, in_place, slotted; };
  for (const Case c : {Case{false, false, true}, Case{false, true, false}, Case{true, false, true}}) {
    const bool normed = c.normed;
    const std::string what = std::string(normed ? "with q/k norms" : "rotation only") +
                             (c.in_place ? ", in place" : "") + (c.slotted ? "" : ", no slots");
    const std::int32_t* sl = c.slotted ? slots.data() : nullptr;
    auto q = random_buffer<T>(qn, 11), k = random_buffer<T>(kn, 12), v = random_buffer<T>(kn, 13);
    auto wq = random_buffer<T>(st.hd, 14, nullptr, 0.5, 1.5), wk = random_buffer<T>(st.hd, 15, nullptr, 0.5, 1.5);
    auto kc1 = random_buffer<T>(cache_n, 16), vc1 = random_buffer<T>(cache_n, 17);
    auto kc2 = random_buffer<T>(cache_n, 16), vc2 = random_buffer<T>(cache_n, 17);
    Buffer<T> fused_q(qn);
    if (c.in_place) fused_q.set(q.host());
    kernels::qk_rope_cache_write(ExecSpace(), s, sl, pos.data(), c.in_place ? fused_q.data() : q.data(), k.data(),
                                 v.data(), normed ? wq.data() : nullptr, normed ? wk.data() : nullptr, eps,
                                 table.data(), fused_q.data(), kc1.data(), vc1.data());
    // The separate kernels, as the model's other passes run them.
    Buffer<T> sq(qn), sk(kn);
    Buffer<float> rstd_q(long(st.rows) * st.H), rstd_k(long(st.rows) * st.G);
    if (normed) {
      kernels::rmsnorm_forward(ExecSpace(), q.data(), wq.data(), sq.data(), rstd_q.data(), st.rows * st.H, st.hd, eps);
      kernels::rmsnorm_forward(ExecSpace(), k.data(), wk.data(), sk.data(), rstd_k.data(), st.rows * st.G, st.hd, eps);
    } else {
      sq.set(q.host());
      sk.set(k.host());
    }
    kernels::rope_forward(ExecSpace(), sq.data(), table.data(), st.rows, st.H, st.hd);
    kernels::rope_forward(ExecSpace(), sk.data(), table.data(), st.rows, st.G, st.hd);
    kernels::kv_cache_write(ExecSpace(), s, sl, pos.data(), sk.data(), v.data(), kc2.data(), vc2.data());
    Kokkos::fence();
    if (normed) {
      // The norm's scale may differ in its last bits; through the product and the rotation's two
      // terms that moves an output by up to a few ulp (1.6 seen in fp32; bf16's rounding absorbs it).
      const double tol = 4 * unit_roundoff<T>();
      expect_close(fused_q.host(), sq.host(), tol, tol, what + ": queries");
      expect_close(kc1.host(), kc2.host(), tol, tol, what + ": key cache");
    } else {
      test::expect_same_bits(fused_q.data(), sq.data(), qn, what + ": queries");
      test::expect_same_bits(kc1.data(), kc2.data(), cache_n, what + ": key cache");
    }
    test::expect_same_bits(vc1.data(), vc2.data(), cache_n, what + ": value cache");
  }
}

// A decode step whose q, k and v ran as one GEMM reads them from rows of (q | k | v): the same
// bits as from buffers of their own.
TYPED_TEST(QkRopeCache, RowsOfOneProductGiveTheSameBits) {
  using T = TypeParam;
  const Step st;
  kernels::CacheShape s{st.rows, st.max_len, st.H, st.G, st.hd};
  const int Hq = st.H * st.hd, Hkv = st.G * st.hd, width = Hq + 2 * Hkv;
  const long qn = long(st.rows) * Hq, kn = long(st.rows) * Hkv, cache_n = long(st.rows) * st.max_len * Hkv;
  auto slots = device_ints(st.slots), pos = device_ints(st.pos);
  Buffer<float> table(long(st.rows) * st.hd);
  kernels::rope_table(ExecSpace(), pos.data(), st.rows, st.hd, kernels::RopeFrequencies{}, table.data());
  for (const bool normed : {false, true}) {
    std::vector<double> qh, kh, vh;
    auto q = random_buffer<T>(qn, 21, &qh), k = random_buffer<T>(kn, 22, &kh), v = random_buffer<T>(kn, 23, &vh);
    std::vector<double> rows;
    for (int r = 0; r < st.rows; ++r) {
      rows.insert(rows.end(), qh.begin() + long(r) * Hq, qh.begin() + long(r + 1) * Hq);
      rows.insert(rows.end(), kh.begin() + long(r) * Hkv, kh.begin() + long(r + 1) * Hkv);
      rows.insert(rows.end(), vh.begin() + long(r) * Hkv, vh.begin() + long(r + 1) * Hkv);
    }
    Buffer<T> qkv(long(st.rows) * width);
    qkv.set(rows);
    auto wq = random_buffer<T>(st.hd, 24, nullptr, 0.5, 1.5), wk = random_buffer<T>(st.hd, 25, nullptr, 0.5, 1.5);
    auto kc1 = random_buffer<T>(cache_n, 26), vc1 = random_buffer<T>(cache_n, 27);
    auto kc2 = random_buffer<T>(cache_n, 26), vc2 = random_buffer<T>(cache_n, 27);
    Buffer<T> q1(qn), q2(qn);
    q1.poison();
    q2.poison();
    kernels::qk_rope_cache_write(ExecSpace(), s, slots.data(), pos.data(), q.data(), k.data(), v.data(),
                                 normed ? wq.data() : nullptr, normed ? wk.data() : nullptr, 1e-6f, table.data(),
                                 q1.data(), kc1.data(), vc1.data());
    kernels::qk_rope_cache_write(ExecSpace(), s, slots.data(), pos.data(), qkv.data(), qkv.data() + Hq,
                                 qkv.data() + Hq + Hkv, normed ? wq.data() : nullptr, normed ? wk.data() : nullptr,
                                 1e-6f, table.data(), q2.data(), kc2.data(), vc2.data(), width);
    Kokkos::fence();
    const std::string what = normed ? "with q/k norms" : "rotation only";
    test::expect_same_bits(q2.data(), q1.data(), qn, what + ": queries");
    test::expect_same_bits(kc2.data(), kc1.data(), cache_n, what + ": key cache");
    test::expect_same_bits(vc2.data(), vc1.data(), cache_n, what + ": value cache");
  }
}

// The head work and the attention together (kernels/attention_decode_heads.hpp): on GPU builds one
// launch, whose CTAs form their query heads and the new key and value themselves, against the
// two launches it replaces (qk_rope_cache_write, then attention_decode) and against fp64. The
// model's shapes (head dims 64 and 128, GQA groups 1 to 8, with and without the heads' norms),
// contiguous and paged caches, rows of one (q | k | v) product or buffers of their own, short
// rows and rows split over several ranges of positions (the new entry lies in the last).
TEST(QkRopeCacheAttentionDecode, OneLaunchMatchesTwoAndTheReference) {
  using T = bf16;
  struct Shape { int H, G, hd; bool normed; };
  const float eps = 1e-6f;
  const int R = 5, L = 1200, shift = 4, bps = (L + 15) >> shift;
  const std::vector<int> pos = {0, 1199, 256, 17, 700}, slot = {2, 0, 4, 1, 3};
  int variant = 0;
  for (const Shape& sh : {Shape{16, 8, 128, true}, Shape{32, 8, 64, false}, Shape{12, 2, 128, true},
                          Shape{6, 1, 64, true}, Shape{16, 1, 128, false}, Shape{4, 4, 64, true}}) {
    for (const bool paged : {false, true}) {
      const bool strided = ++variant % 2 == 0;
      std::vector<std::int32_t> table;
      long entries = long(R) * L;
      if (paged) {   // every block its sequence's own, at a shuffled pool position
        table.resize(std::size_t(R) * bps);
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), std::mt19937(5));
        entries = long(R) * bps << shift;
      }
      const auto table_d = device_ints(table);
      kernels::CacheShape s{R, L, sh.H, sh.G, sh.hd};
      if (paged) {
        s.block_table = table_d.data();
        s.blocks_per_sequence = bps;
        s.block_shift = shift;
      }
      kernels::CacheShape host_shape = s;
      host_shape.block_table = paged ? table.data() : nullptr;
      const int Hq = sh.H * sh.hd, Hkv = sh.G * sh.hd, width = Hq + 2 * Hkv;
      const long stride = strided ? width : 0;
      const long qn = long(R) * Hq, cache_n = entries * Hkv;
      // q, k and v: rows of one product, or three buffers of their own.
      auto qkv = random_buffer<T>(long(R) * width, 31);
      auto q_own = random_buffer<T>(qn, 32), k_own = random_buffer<T>(long(R) * Hkv, 33);
      auto v_own = random_buffer<T>(long(R) * Hkv, 34);
      const T* q_raw = strided ? qkv.data() : q_own.data();
      const T* k_raw = strided ? qkv.data() + Hq : k_own.data();
      const T* v = strided ? qkv.data() + Hq + Hkv : v_own.data();
      auto wq = random_buffer<T>(sh.hd, 35, nullptr, 0.5, 1.5), wk = random_buffer<T>(sh.hd, 36, nullptr, 0.5, 1.5);
      auto pos_d = device_ints(pos), slot_d = device_ints(slot);
      Buffer<float> rope(long(R) * sh.hd);
      kernels::rope_table(ExecSpace(), pos_d.data(), R, sh.hd, kernels::RopeFrequencies{}, rope.data());
      const kernels::DecodeSplitSizes sizes = kernels::attention_decode_split_sizes<T>(s);
      Kokkos::View<float*, MemSpace> partials("partials", sizes.partials);
      Kokkos::View<std::uint32_t*, MemSpace> arrivals("arrivals", sizes.arrivals);
      const kernels::DecodeSplitWorkspace split{partials.data(), arrivals.data()};
      const std::string what = fmt::format("H {} G {} hd {}{}, {}, {}", sh.H, sh.G, sh.hd,
                                           sh.normed ? " with q/k norms" : "", paged ? "paged" : "contiguous",
                                           strided ? "rows of one product" : "buffers of their own");
      struct Result { std::vector<double> q, k_cache, v_cache, out; };
      const auto run = [&](bool one_launch) {
        auto kc = random_buffer<T>(cache_n, 37), vc = random_buffer<T>(cache_n, 38);
        Buffer<T> q(qn), out(qn);
        q.poison();
        out.poison();
        kernels::qk_rope_cache_attention_decode(ExecSpace(), s, slot_d.data(), pos_d.data(), q_raw, k_raw, v,
                                                sh.normed ? wq.data() : nullptr, sh.normed ? wk.data() : nullptr, eps,
                                                rope.data(), q.data(), kc.data(), vc.data(), stride, out.data(), split,
                                                one_launch);
        return Result{q.host(), kc.host(), vc.host(), out.host()};
      };
      const Result two = run(false), one = run(true);
      // The two launches' own queries and cache, exact as they hold them, through fp64 attention:
      // the one launch's output within its rounding (its heads' sums of squares in another order
      // move a query or a key by an ulp at most now and then, far inside that).
      const std::vector<double> want = test::decode_reference(
          s, slot, pos, two.q, two.k_cache, two.v_cache, [&](long seq, long j) { return host_shape.entry(seq, j); });
      expect_close(one.out, want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what + ": output");
      expect_close(two.out, want, 2 * unit_roundoff<T>(), 64 * unit_roundoff<float>(), what + ": two launches");
      expect_close(one.k_cache, two.k_cache, 2 * unit_roundoff<T>(), 0, what + ": key cache");
      EXPECT_EQ(one.v_cache, two.v_cache) << what << ": value cache";
      // The two launches' queries and new keys against fp64 (the norm, the rotation).
      std::vector<double> qh(qn), k_got, k_want, wqh = wq.host(), wkh = wk.host();
      const std::vector<double> all = strided ? qkv.host() : std::vector<double>();
      const std::vector<double> qo = strided ? all : q_own.host(), ko = strided ? all : k_own.host();
      for (int r = 0; r < R; ++r) {
        for (int h = 0; h < sh.H; ++h) {
          const double* x = &qo[strided ? long(r) * width + h * sh.hd : (long(r) * sh.H + h) * sh.hd];
          const auto o = head_reference<T>(x, sh.normed ? &wqh : nullptr, sh.hd, pos[r], eps);
          std::copy(o.begin(), o.end(), qh.begin() + (long(r) * sh.H + h) * sh.hd);
        }
        for (int g = 0; g < sh.G; ++g) {
          const double* x = &ko[strided ? long(r) * width + Hq + g * sh.hd : (long(r) * sh.G + g) * sh.hd];
          const auto o = head_reference<T>(x, sh.normed ? &wkh : nullptr, sh.hd, pos[r], eps);
          const long at = (host_shape.entry(slot[r], pos[r]) * sh.G + g) * sh.hd;
          k_got.insert(k_got.end(), two.k_cache.begin() + at, two.k_cache.begin() + at + sh.hd);
          k_want.insert(k_want.end(), o.begin(), o.end());
        }
      }
      // The fp32 angle at position 1 199 is off by up to about 1e-4 radians.
      expect_close(two.q, qh, 2 * unit_roundoff<T>(), 4 * unit_roundoff<T>() + 1e-3, what + ": queries");
      expect_close(k_got, k_want, 2 * unit_roundoff<T>(), 4 * unit_roundoff<T>() + 1e-3, what + ": new keys");
      // A second launch writes the same entries and gives the same bits.
      EXPECT_EQ(run(true).out, one.out) << what << ": a second launch";
    }
  }
}

// On GPU builds the one launch may start while the product before it runs (a dependent launch,
// kernels/dependent_launch.cuh) and load its first tile of the cache meanwhile, yet it reads the
// product's raw heads and the rotations only once that has finished: q | k | v written by a long
// matrix-vector product with fixed weights (64 MiB; itself a dependent launch, its output
// poisoned before it) give the attention and the cache the bits of the same launches with a
// fence between them. Paged, rows split over ranges of positions, Qwen3's head norms.
TEST(QkRopeCacheAttentionDecode, MayStartEarlyYetReadsTheHeadsOnceTheProductBeforeIsDone) {
#if !defined(KOKKOS_ENABLE_CUDA)
  GTEST_SKIP() << "dependent launches exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
#else
  using T = bf16;
  const int R = kernels::kDecodeGemvMaxRows, H = 16, G = 8, hd = 128, k1 = 8192;
  const int L = 1200, shift = 4, bps = (L + 15) >> shift;
  const int Hq = H * hd, Hkv = G * hd, width = Hq + 2 * Hkv;
  const std::vector<int> pos = {1199, 0, 700, 33}, slot = {3, 1, 0, 2};
  std::vector<std::int32_t> table(std::size_t(R) * bps);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  const auto table_d = device_ints(table), pos_d = device_ints(pos), slot_d = device_ints(slot);
  kernels::CacheShape s{R, L, H, G, hd};
  s.block_table = table_d.data();
  s.blocks_per_sequence = bps;
  s.block_shift = shift;
  const long cache_n = (long(R) * bps << shift) * Hkv;
  auto x = random_buffer<T>(long(R) * k1, 51);
  auto w = random_buffer<T>(long(width) * k1, 52, nullptr, -0.05, 0.05);
  auto wq = random_buffer<T>(hd, 53, nullptr, 0.5, 1.5), wk = random_buffer<T>(hd, 54, nullptr, 0.5, 1.5);
  Buffer<float> rope(long(R) * hd);
  kernels::rope_table(ExecSpace(), pos_d.data(), R, hd, kernels::RopeFrequencies{}, rope.data());
  const kernels::DecodeSplitSizes sizes = kernels::attention_decode_split_sizes<T>(s);
  Kokkos::View<float*, MemSpace> partials("partials", sizes.partials);
  Kokkos::View<std::uint32_t*, MemSpace> arrivals("arrivals", sizes.arrivals);
  const kernels::DecodeSplitWorkspace split{partials.data(), arrivals.data()};
  struct Result { std::vector<double> out, k_cache, v_cache; };
  const auto run = [&](bool fence_between, Result& got) {
    auto kc = random_buffer<T>(cache_n, 55), vc = random_buffer<T>(cache_n, 56);
    Buffer<T> qkv(long(R) * width), q(long(R) * Hq), out(long(R) * Hq);
    qkv.poison();
    out.poison();
    ASSERT_TRUE(kernels::decode_gemv<T>(ExecSpace(), R, k1, x.data(), {{w.data(), qkv.data(), nullptr, width}}, {},
                                        kernels::GemvWeights::fixed));
    if (fence_between) Kokkos::fence();
    kernels::qk_rope_cache_attention_decode(ExecSpace(), s, slot_d.data(), pos_d.data(), qkv.data(),
                                            qkv.data() + Hq, qkv.data() + Hq + Hkv, wq.data(), wk.data(), 1e-6f,
                                            rope.data(), q.data(), kc.data(), vc.data(), width, out.data(), split);
    Kokkos::fence();
    got = Result{out.host(), kc.host(), vc.host()};
  };
  Result fenced, chained;
  run(true, fenced);
  run(false, chained);
  for (double v : chained.out) ASSERT_TRUE(std::isfinite(v)) << "a poisoned head was read";
  test::expect_same_bits(chained.out, fenced.out, "output");
  EXPECT_EQ(chained.k_cache, fenced.k_cache) << "key cache";
  EXPECT_EQ(chained.v_cache, fenced.v_cache) << "value cache";
#endif
}

}  // namespace
}  // namespace shardrl
