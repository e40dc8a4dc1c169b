// The decode step's fused head work (kernels/qk_rope_cache.hpp) against an fp64 host reference
// of norm -> rotation -> cache write, float and bf16, with and without the per-head norms, rows
// addressing cache slots out of order; and against the separate kernels it replaces
// (rmsnorm_forward, rope_forward, kv_cache_write): bit for bit without the norms, within a
// rounding with them (the sum of squares is reduced in another order).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/attention_decode.hpp"
#include "kernels/qk_rope_cache.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"

namespace shardrl {
namespace {

using test::Buffer;
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

// rope(norm(x)) of one head in fp64: norm(x) = x / rms(x) * w, rounded to T as the kernel's
// input to the rotation is; angle_i = pos * theta^(-2i/hd).
template <class T>
std::vector<double> head_reference(const double* x, const std::vector<double>* w, int hd, int pos, float eps) {
  const int half = hd / 2;
  std::vector<double> n(x, x + hd);
  if (w) {
    double ss = 0;
    for (int d = 0; d < hd; ++d) ss += x[d] * x[d];
    const double r = 1.0 / std::sqrt(ss / hd + eps);
    for (int d = 0; d < hd; ++d) n[d] = static_cast<float>(T(static_cast<float>(x[d] * r * (*w)[d])));
  }
  std::vector<double> out(hd);
  for (int i = 0; i < half; ++i) {
    const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
    out[i] = n[i] * std::cos(angle) - n[i + half] * std::sin(angle);
    out[i + half] = n[i + half] * std::cos(angle) + n[i] * std::sin(angle);
  }
  return out;
}

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

}  // namespace
}  // namespace shardrl
