// Decode attention and the KV-cache write against an fp64 host reference: float and bf16, GQA,
// rows at different positions, outputs poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_test_util.hpp"
#include "kernels/attention_decode.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::random_buffer;
using test::unit_roundoff;

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
    std::vector<double> want(q_n, 0.0);
    const int group = sh.H / sh.G;
    for (int r = 0; r < sh.R; ++r)
      for (int h = 0; h < sh.H; ++h) {
        const int g = h / group;
        std::vector<double> sc(pos[r] + 1);
        double mx = -1e300, z = 0;
        for (int j = 0; j <= pos[r]; ++j) {
          double dot = 0;
          for (int d = 0; d < sh.hd; ++d)
            dot += q[(long(r) * sh.H + h) * sh.hd + d] * kc[((long(r) * sh.L + j) * sh.G + g) * sh.hd + d];
          sc[j] = dot / std::sqrt(double(sh.hd));
          mx = std::max(mx, sc[j]);
        }
        for (auto& e : sc) z += (e = std::exp(e - mx));
        for (int j = 0; j <= pos[r]; ++j)
          for (int d = 0; d < sh.hd; ++d)
            want[(long(r) * sh.H + h) * sh.hd + d] += sc[j] / z * vc[((long(r) * sh.L + j) * sh.G + g) * sh.hd + d];
      }
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

}  // namespace
}  // namespace shardrl
