// The decode step's matrix-vector kernels (kernels/decode_gemv.hpp) against an fp64 host
// reference: 1 to kDecodeGemvMaxRows rows, inner sizes from one 16-byte piece to past a warp's
// stride, several products in one launch with and without a residual (in place and not), the
// SwiGLU form; outputs poisoned first with guard elements after them; RMSNorm folded in (and
// where it is declined); a row's bits the same at any row count and on repeat. The kernels
// exist on GPU builds only; elsewhere the model keeps its GEMMs, which the wrappers say by
// declining.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/decode_gemv.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::expect_guard_untouched;
using test::kGuard;
using test::random_buffer;
using test::unit_roundoff;

constexpr double kU = unit_roundoff<bf16>();

// y (rows, n) = x (rows, k) w^T + add, in fp64.
std::vector<double> product_reference(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>* add, int rows, int n, int k) {
  std::vector<double> y(static_cast<std::size_t>(rows) * n);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) {
      double s = add ? (*add)[std::size_t(r) * n + j] : 0.0;
      for (int i = 0; i < k; ++i) s += x[std::size_t(r) * k + i] * w[std::size_t(j) * k + i];
      y[std::size_t(r) * n + j] = s;
    }
  return y;
}

bool kernels_here() {
#if defined(KOKKOS_ENABLE_CUDA)
  return true;
#else
  return false;
#endif
}

TEST(DecodeGemv, OtherBuildsAndPrecisionsDecline) {
  // Declining is what sends the model to its GEMMs: fp32 always, bf16 on builds without the kernels.
  Buffer<float> xf(64), wf(64 * 8), yf(8);
  EXPECT_FALSE(kernels::decode_gemv<float>(ExecSpace(), 1, 64, xf.data(), {{wf.data(), yf.data(), nullptr, 8}}));
  EXPECT_FALSE(kernels::decode_gemv_swiglu<float>(ExecSpace(), 1, 64, xf.data(), wf.data(), wf.data(), 8, yf.data()));
  Buffer<bf16> x(64), w(64 * 8), y(8);
  EXPECT_EQ(kernels::decode_gemv<bf16>(ExecSpace(), 1, 64, x.data(), {{w.data(), y.data(), nullptr, 8}}),
            kernels_here());
}

TEST(DecodeGemv, UnsupportedCallsDecline) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  const int most = kernels::kDecodeGemvMaxRows;
  Buffer<bf16> x((most + 1) * 72 + 8), w(72 * 8 + 8), y((most + 1) * 8);
  const auto runs = [&](int rows, int k, const bf16* xp, const bf16* wp) {
    return kernels::decode_gemv<bf16>(ExecSpace(), rows, k, xp, {{wp, y.data(), nullptr, 8}});
  };
  EXPECT_TRUE(runs(most, 72, x.data(), w.data()));
  EXPECT_FALSE(runs(most + 1, 72, x.data(), w.data())) << "more rows than the kernels take";
  EXPECT_FALSE(runs(0, 72, x.data(), w.data()));
  EXPECT_FALSE(runs(1, 68, x.data(), w.data())) << "k not a multiple of 8";
  EXPECT_FALSE(runs(1, 72, x.data() + 1, w.data())) << "x not 16-byte aligned";
  EXPECT_FALSE(runs(1, 72, x.data(), w.data() + 4)) << "w not 16-byte aligned";
  EXPECT_FALSE(kernels::decode_gemv<bf16>(ExecSpace(), 1, 72, x.data(), {})) << "no product";
  EXPECT_FALSE(kernels::decode_gemv<bf16>(ExecSpace(), 1, 72, x.data(), {{w.data(), y.data(), nullptr, 0}}));
}

TEST(DecodeGemv, ProductsMatchTheReference) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  // k: one 16-byte piece, a partial warp stride, exactly one batch of a lane's loads at one row
  // (4 x 32 pieces), two batches, a tail past them, three batches.
  for (int k : {8, 72, 1024, 2048, 2056, 3072})
    for (int rows = 1; rows <= kernels::kDecodeGemvMaxRows; ++rows) {
      const std::string what = "k " + std::to_string(k) + ", rows " + std::to_string(rows);
      // Three products sharing x: n = 1 without a residual, 37 with a separate one, 300 in place.
      const int n[3] = {1, 37, 300};
      std::vector<double> x, w[3], add1, add2;
      Buffer<bf16> xb = random_buffer<bf16>(long(rows) * k, 11 + k + rows, &x);
      std::vector<Buffer<bf16>> wb;
      for (int p = 0; p < 3; ++p) wb.push_back(random_buffer<bf16>(long(n[p]) * k, 100 * p + k, &w[p]));
      Buffer<bf16> y0(long(rows) * n[0] + kGuard), y1(long(rows) * n[1] + kGuard);
      y0.poison();
      y1.poison();
      Buffer<bf16> a1 = random_buffer<bf16>(long(rows) * n[1], 7, &add1);
      Buffer<bf16> y2 = random_buffer<bf16>(long(rows) * n[2], 8, &add2);   // the residual, replaced in place
      ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, k, xb.data(),
                                             {{wb[0].data(), y0.data(), nullptr, n[0]},
                                              {wb[1].data(), y1.data(), a1.data(), n[1]},
                                              {wb[2].data(), y2.data(), y2.data(), n[2]}}))
          << what;
      Kokkos::fence();
      // fp32 sums of k products of bf16 values in [-1, 1), then one rounding to bf16.
      const double atol = 1e-6 * k;
      const auto y0h = y0.host(), y1h = y1.host();
      expect_close({y0h.begin(), y0h.begin() + rows * n[0]}, product_reference(x, w[0], nullptr, rows, n[0], k), kU,
                   atol, what + ", product 0");
      expect_close({y1h.begin(), y1h.begin() + rows * n[1]}, product_reference(x, w[1], &add1, rows, n[1], k), kU,
                   atol, what + ", product 1 (+ residual)");
      expect_close(y2.host(), product_reference(x, w[2], &add2, rows, n[2], k), kU, atol,
                   what + ", product 2 (+ residual in place)");
      expect_guard_untouched(y0h, rows * n[0], "product 0");
      expect_guard_untouched(y1h, rows * n[1], "product 1");
    }
}

TEST(DecodeGemv, SwigluMatchesTheReference) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  for (int k : {64, 1032, 3072})
    for (int rows = 1; rows <= kernels::kDecodeGemvMaxRows; ++rows) {
      const std::string what = "k " + std::to_string(k) + ", rows " + std::to_string(rows);
      const int n = 45;
      std::vector<double> x, wg, wu;
      Buffer<bf16> xb = random_buffer<bf16>(long(rows) * k, 21 + k, &x);
      Buffer<bf16> gb = random_buffer<bf16>(long(n) * k, 22 + rows, &wg), ub = random_buffer<bf16>(long(n) * k, 23, &wu);
      Buffer<bf16> act(long(rows) * n + kGuard);
      act.poison();
      ASSERT_TRUE(kernels::decode_gemv_swiglu<bf16>(ExecSpace(), rows, k, xb.data(), gb.data(), ub.data(), n,
                                                    act.data()))
          << what;
      Kokkos::fence();
      const std::vector<double> g = product_reference(x, wg, nullptr, rows, n, k), u = product_reference(x, wu, nullptr, rows, n, k);
      std::vector<double> want(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      // g and u each rounded to bf16 (silu's relative sensitivity to g is at most ~1.1), then the
      // activation: about 3.2 roundings' worth, held to 4.
      const auto got = act.host();
      expect_close({got.begin(), got.begin() + rows * n}, want, 4 * kU, 1e-6 * k, what);
      expect_guard_untouched(got, rows * n, "activation");
    }
}

// RMSNorm folded in: x's rows normalised (x / rms(x) * g, rounded to bf16) before the products.
// The reference normalises in fp64 and rounds to bf16 as the kernel does; the kernel's fp32 scale
// may round an element of the normalised row the other way, so each output is held to one bf16
// rounding of itself plus one of the sum of |h_i w_i| (every element off by one rounding).
TEST(DecodeGemv, FoldedNormsMatchTheReference) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  const float eps = 1e-6f;
  for (int k : {64, 1032})
    for (int rows = 1; rows <= kernels::kDecodeGemvMaxRows; ++rows) {
      const std::string what = "k " + std::to_string(k) + ", rows " + std::to_string(rows);
      const int n = 37;
      std::vector<double> x, g, w, wu;
      // x away from 1 in scale, so a missing norm is far outside the tolerance.
      Buffer<bf16> xb = random_buffer<bf16>(long(rows) * k, 41 + k, &x, -4.0, 4.0);
      Buffer<bf16> gb = random_buffer<bf16>(k, 42, &g, 0.5, 1.5);
      Buffer<bf16> wb = random_buffer<bf16>(long(n) * k, 43, &w), ub = random_buffer<bf16>(long(n) * k, 44, &wu);
      std::vector<double> h(x.size());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int i = 0; i < k; ++i) ss += x[std::size_t(r) * k + i] * x[std::size_t(r) * k + i];
        const double scale = 1.0 / std::sqrt(ss / k + eps);
        for (int i = 0; i < k; ++i) {
          const std::size_t at = std::size_t(r) * k + i;
          h[at] = static_cast<float>(bf16(static_cast<float>(x[at] * scale * g[i])));
        }
      }
      const auto bound = [&](const std::vector<double>& wt, int r, int j) {
        double s = 0;
        for (int i = 0; i < k; ++i) s += std::fabs(h[std::size_t(r) * k + i] * wt[std::size_t(j) * k + i]);
        return s;
      };
      Buffer<bf16> y(long(rows) * n), act(long(rows) * n);
      y.poison();
      act.poison();
      ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, k, xb.data(), {{wb.data(), y.data(), nullptr, n}},
                                             {gb.data(), eps}))
          << what;
      ASSERT_TRUE(kernels::decode_gemv_swiglu<bf16>(ExecSpace(), rows, k, xb.data(), wb.data(), ub.data(), n,
                                                    act.data(), {gb.data(), eps}))
          << what;
      Kokkos::fence();
      const std::vector<double> want = product_reference(h, w, nullptr, rows, n, k);
      const std::vector<double> up = product_reference(h, wu, nullptr, rows, n, k);
      const auto got = y.host(), got_act = act.host();
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < n; ++j) {
          const std::size_t at = std::size_t(r) * n + j;
          EXPECT_NEAR(got[at], want[at], kU * (std::fabs(want[at]) + bound(w, r, j)) + 1e-6 * k)
              << what << ", product, row " << r << " column " << j;
          // SwiGLU: g and u each carry that error, then the activation's roundings (as above).
          const double gv = want[at], uv = up[at], a = gv / (1 + std::exp(-gv)) * uv;
          const double da = 1.1 * std::fabs(uv) * kU * (std::fabs(gv) + bound(w, r, j)) +
                            std::fabs(gv) * kU * (std::fabs(uv) + bound(wu, r, j));
          EXPECT_NEAR(got_act[at], a, 4 * kU * std::fabs(a) + da + 1e-6 * k) << what << ", SwiGLU, row " << r;
        }
    }
}

// A row's bits are its own: the same at any row count (so a decode graph's bucket of 4 rows draws
// what an eager step of fewer rows drew), with and without the folded norm, and on repeat.
TEST(DecodeGemv, ARowsResultDoesNotDependOnTheOtherRows) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  const int most = kernels::kDecodeGemvMaxRows, k = 3008, n = 513;
  Buffer<bf16> x = random_buffer<bf16>(long(most) * k, 31, nullptr, -3.0, 3.0), w = random_buffer<bf16>(long(n) * k, 32);
  Buffer<bf16> g = random_buffer<bf16>(k, 33, nullptr, 0.5, 1.5);
  for (const bf16* norm : {static_cast<const bf16*>(nullptr), static_cast<const bf16*>(g.data())}) {
    const std::string what = norm ? "with the norm folded in" : "without a norm";
    for (int rows = 1; rows <= most; ++rows) {
      Buffer<bf16> y(long(rows) * n), again(long(rows) * n), act(long(rows) * n), act_all(long(most) * n);
      Buffer<bf16> y_all(long(most) * n);
      for (Buffer<bf16>* out : {&y, &again})
        ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, k, x.data(), {{w.data(), out->data(), nullptr, n}},
                                               {norm, 1e-6f}));
      ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), most, k, x.data(), {{w.data(), y_all.data(), nullptr, n}},
                                             {norm, 1e-6f}));
      ASSERT_TRUE(kernels::decode_gemv_swiglu<bf16>(ExecSpace(), rows, k, x.data(), w.data(), w.data(), n, act.data(),
                                                    {norm, 1e-6f}));
      ASSERT_TRUE(kernels::decode_gemv_swiglu<bf16>(ExecSpace(), most, k, x.data(), w.data(), w.data(), n,
                                                    act_all.data(), {norm, 1e-6f}));
      Kokkos::fence();
      const long first = long(rows) * n;   // the first `rows` rows of the call with every row
      test::expect_same_bits(y.data(), again.data(), first, what + ": a repeat");
      test::expect_same_bits(y.data(), y_all.data(), first, what + ": " + std::to_string(rows) + " rows against " +
                                                             std::to_string(most));
      test::expect_same_bits(act.data(), act_all.data(), first, what + ", SwiGLU: " + std::to_string(rows) +
                                                                     " rows against " + std::to_string(most));
    }
  }
}

// With fixed weights a kernel may start before the ones ahead of it finish (programmatic
// dependent launch) and load its weights early, but it reads its input only once they are done: a
// chain of products launched with fixed weights, the first long (64 MiB of weights) and its output
// poisoned before it, read by the next launch and by the one after an unrelated product (the
// plain form with the norm folded in, then the SwiGLU form with it), gives the bits of the same
// chain launched in order.
TEST(DecodeGemv, FixedWeightsStartEarlyYetReadTheirInputsAfterTheKernelsBefore) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  const int k1 = 8192, n1 = 4096, n2 = 520;
  Buffer<bf16> x = random_buffer<bf16>(long(kernels::kDecodeGemvMaxRows) * k1, 71, nullptr, -2.0, 2.0);
  Buffer<bf16> w1 = random_buffer<bf16>(long(n1) * k1, 72), w2 = random_buffer<bf16>(long(n2) * n1, 73);
  Buffer<bf16> g = random_buffer<bf16>(n1, 74, nullptr, 0.5, 1.5);
  for (int rows = 1; rows <= kernels::kDecodeGemvMaxRows; ++rows) {
    std::vector<double> want[2];   // bf16 values, exact as doubles
    for (kernels::GemvWeights weights : {kernels::GemvWeights::may_change, kernels::GemvWeights::fixed}) {
      const bool fixed = weights == kernels::GemvWeights::fixed;
      Buffer<bf16> mid(long(rows) * n1), other(long(rows) * n1), y(long(rows) * n2), act(long(rows) * n2);
      const auto first = [&] {
        mid.poison();   // a fence: the chain starts after it
        ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, k1, x.data(),
                                               {{w1.data(), mid.data(), nullptr, n1}}, {}, weights));
      };
      first();   // then its reader, next
      ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, n1, mid.data(), {{w2.data(), y.data(), nullptr, n2}},
                                             {g.data(), 1e-6f}, weights));
      first();   // then an unrelated product, then the reader, two launches after the writer
      ASSERT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, k1, x.data(),
                                             {{w1.data(), other.data(), nullptr, n1}}, {}, weights));
      ASSERT_TRUE(kernels::decode_gemv_swiglu<bf16>(ExecSpace(), rows, n1, mid.data(), w2.data(), w2.data(), n2,
                                                    act.data(), {g.data(), 1e-6f}, weights));
      Kokkos::fence();
      const std::string what = std::to_string(rows) + (fixed ? " rows, fixed weights" : " rows, in order");
      const auto got = y.host(), got_act = act.host();
      for (const auto* values : {&got, &got_act})
        for (double v : *values) ASSERT_TRUE(std::isfinite(v)) << what << ": a poisoned input was read";
      if (!fixed) {
        want[0] = got;
        want[1] = got_act;
      } else {
        test::expect_same_bits(got, want[0], what + ": products");
        test::expect_same_bits(got_act, want[1], what + ": SwiGLU, two launches after the writer");
      }
    }
  }
}

// The norm folds in while the rows of the most rows fit a CTA's shared memory (k <= 6136),
// whatever the call's rows, and is declined past it (the model then runs the norm's own launch).
TEST(DecodeGemv, TheFoldedNormsReachIsSetByKAlone) {
  if (!kernels_here()) GTEST_SKIP() << "the decode matrix-vector kernels exist only in GPU builds (SHARDRL_ENABLE_CUDA)";
  const int most = kernels::kDecodeGemvMaxRows;
  for (int k : {6136, 6144}) {
    Buffer<bf16> x = random_buffer<bf16>(long(most) * k, 51), w = random_buffer<bf16>(16L * k, 52);
    Buffer<bf16> g = random_buffer<bf16>(k, 53, nullptr, 0.5, 1.5), y(long(most) * 16);
    for (int rows : {1, most}) {
      const bool ran = kernels::decode_gemv<bf16>(ExecSpace(), rows, k, x.data(), {{w.data(), y.data(), nullptr, 16}},
                                                  {g.data(), 1e-6f});
      EXPECT_EQ(ran, k <= 6136) << "k " << k << ", rows " << rows;
      EXPECT_TRUE(kernels::decode_gemv<bf16>(ExecSpace(), rows, k, x.data(), {{w.data(), y.data(), nullptr, 16}}))
          << "without the norm, k " << k;
    }
    Kokkos::fence();
  }
}

}  // namespace
}  // namespace shardrl
