// RMSNorm forward/backward kernels against an fp64 host reference, for float and bf16; the
// reference backward is itself checked against finite differences of the reference forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/rmsnorm.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::expect_guard_untouched;
using test::kGuard;
using test::unit_roundoff;

struct Shape {
  int R, C;
  double x_range;   // x uniform in [-x_range, x_range): 1e-3 makes eps matter
};
// The last two give the weight gradient several rows per chunk, and empty trailing chunks
// (kernels::rmsnorm_dw_chunks: 256 chunks of 4 rows for 1000 x 1024, 64 of 6 for 333 x 4096).
const Shape kShapes[] = {{1, 1, 1.0},      {3, 7, 1.0},       {37, 64, 1.0},     {5, 129, 1.0},
                         {3, 64, 1e-3},    {2, 2048, 1.0},    {1000, 1024, 1.0}, {333, 4096, 1.0}};
constexpr float kEps = 1e-6f;

// fp64 references.
std::vector<double> ref_rstd(const std::vector<double>& x, int R, int C, double eps) {
  std::vector<double> rstd(R);
  for (int r = 0; r < R; ++r) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
    rstd[r] = 1.0 / std::sqrt(ss / C + eps);
  }
  return rstd;
}
std::vector<double> ref_forward(const std::vector<double>& x, const std::vector<double>& w, int R, int C,
                                double eps) {
  std::vector<double> rstd = ref_rstd(x, R, C, eps), y(x.size());
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * rstd[r] * w[c];
  return y;
}
// dx = beta * dx + gradient; dw += gradient. Takes rstd as an input, as the kernel does.
void ref_backward(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& rstd,
                  const std::vector<double>& dy, int R, int C, double beta, std::vector<double>& dx,
                  std::vector<double>& dw) {
  for (int r = 0; r < R; ++r) {
    double m = 0;
    for (int c = 0; c < C; ++c) m += dy[r * C + c] * w[c] * x[r * C + c] * rstd[r];
    m /= C;
    for (int c = 0; c < C; ++c) {
      const long i = static_cast<long>(r) * C + c;
      const double g = dy[i] * w[c], xhat = x[i] * rstd[r];
      dx[i] = (beta == 0 ? 0.0 : beta * dx[i]) + rstd[r] * (g - xhat * m);
      dw[c] += dy[i] * xhat;
    }
  }
}

TEST(RmsnormReference, BackwardMatchesFiniteDifferences) {
  // L = sum dy * y; a large eps so its place in the derivative is checked as well.
  const int R = 3, C = 7;
  const double eps = 0.1;
  const std::vector<double> x = random_values<double>(R * C, 1), w = random_values<double>(C, 2),
                            dy = random_values<double>(R * C, 3);
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv) {
    std::vector<double> y = ref_forward(xv, wv, R, C, eps);
    double l = 0;
    for (int i = 0; i < R * C; ++i) l += dy[i] * y[i];
    return l;
  };
  std::vector<double> dx(R * C, 0.0), dw(C, 0.0);
  ref_backward(x, w, ref_rstd(x, R, C, eps), dy, R, C, 0.0, dx, dw);
  const double h = 1e-6, tol = 1e-7;   // central differences: O(h^2) + O(1e-16 / h)
  for (int i = 0; i < R * C; ++i) {
    std::vector<double> xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR(dx[i], (loss(xp, w) - loss(xm, w)) / (2 * h), tol) << "dx element " << i;
  }
  for (int c = 0; c < C; ++c) {
    std::vector<double> wp = w, wm = w;
    wp[c] += h;
    wm[c] -= h;
    EXPECT_NEAR(dw[c], (loss(x, wp) - loss(x, wm)) / (2 * h), tol) << "dw element " << c;
  }
}

template <class T>
class RmsnormKernel : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(RmsnormKernel, KernelTypes);

TYPED_TEST(RmsnormKernel, Forward) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 10;
  for (const Shape& s : kShapes) {
    const long n = static_cast<long>(s.R) * s.C;
    std::vector<double> x, w;
    Buffer<T> x_dev = random_buffer<T>(n, ++seed, &x, -s.x_range, s.x_range);
    Buffer<T> w_dev = random_buffer<T>(s.C, ++seed, &w, 0.5, 1.5);
    Buffer<T> y(n + kGuard);
    Buffer<float> rstd(s.R + kGuard);
    y.poison();
    rstd.poison();
    kernels::rmsnorm_forward<T>(space, x_dev.data(), w_dev.data(), y.data(), rstd.data(), s.R, s.C, kEps);

    // rstd: a sum of C non-negative fp32 terms is off by at most ~C u_f relative in any order;
    // sqrt halves that, and /C, +eps, sqrt, 1/x round once each: (C/2 + 4) u_f.
    const double u_f = unit_roundoff<float>();
    const double rstd_rtol = (s.C / 2.0 + 4) * u_f;
    // y = x * rstd * w: two more fp32 products, then one rounding to T.
    const double y_rtol = rstd_rtol + 2 * u_f + unit_roundoff<T>();
    std::vector<double> got_y = y.host(), got_rstd = rstd.host();
    expect_guard_untouched(got_y, n, "rmsnorm_forward y");
    expect_guard_untouched(got_rstd, s.R, "rmsnorm_forward rstd");
    got_y.resize(n);
    got_rstd.resize(s.R);
    expect_close(got_rstd, ref_rstd(x, s.R, s.C, kEps), rstd_rtol, 0.0, "rmsnorm_forward rstd");
    expect_close(got_y, ref_forward(x, w, s.R, s.C, kEps), y_rtol, 0.0, "rmsnorm_forward y");
  }
}

// beta = 0 overwrites a poisoned dx; beta = 1 adds into known values. dw always accumulates.
template <class T>
void check_backward(float beta) {
  ExecSpace space;
  std::uint64_t seed = beta == 0 ? 30 : 50;
  for (const Shape& s : kShapes) {
    const long n = static_cast<long>(s.R) * s.C;
    std::vector<double> x, w, dy, dx;
    Buffer<T> x_dev = random_buffer<T>(n, ++seed, &x, -s.x_range, s.x_range);
    Buffer<T> w_dev = random_buffer<T>(s.C, ++seed, &w, 0.5, 1.5);
    Buffer<T> dy_dev = random_buffer<T>(n, ++seed, &dy);
    // rstd as the forward saves it (fp32), so the reference sees exactly the kernel's input.
    std::vector<double> rstd = ref_rstd(x, s.R, s.C, kEps);
    for (double& r : rstd) r = static_cast<float>(r);
    Buffer<float> rstd_dev(s.R);
    rstd_dev.set(rstd);
    Buffer<T> dx_dev(n + kGuard);
    if (beta == 0) {
      dx_dev.poison();   // must not be read
      dx.assign(n, 0.0);
    } else {
      dx = random_values<T>(n, ++seed);
      std::vector<double> init = dx;
      init.resize(n + kGuard, std::nan(""));
      dx_dev.set(init);
    }
    std::vector<double> dw = random_values<float>(s.C, ++seed);
    std::vector<double> dw_init = dw;
    dw_init.resize(s.C + kGuard, std::nan(""));
    Buffer<float> dw_dev(s.C + kGuard);
    dw_dev.set(dw_init);

    Buffer<float> scratch(kernels::kRmsnormDwScratch);
    scratch.poison();   // the kernel must write every partial sum it reads
    kernels::rmsnorm_backward<T>(space, x_dev.data(), w_dev.data(), rstd_dev.data(), dy_dev.data(), dx_dev.data(),
                                 dw_dev.data(), s.R, s.C, beta, scratch.data());

    // Tolerances from the fp32 error bounds, evaluated on these inputs. dx: the row sum
    // mean(g * xhat) is off by <= (C + 4) u_f * mean|g * xhat|; it is multiplied by |xhat|, and
    // the rest rounds a few times: (C + 8) u_f * rstd * (|g| + |xhat| * mean|g xhat|), plus
    // 2 u_f |dx_old| for the beta add; then rtol u_T for the final rounding to T.
    // dw: R fp32 terms added to the pre-filled value: (R + 3) u_f * (|dw_old| + sum |dy xhat|).
    const double u_f = unit_roundoff<float>();
    double dx_atol = 0;
    std::vector<double> dw_abs(s.C);
    for (int c = 0; c < s.C; ++c) dw_abs[c] = std::fabs(dw[c]);
    for (int r = 0; r < s.R; ++r) {
      double mean_abs = 0;
      for (int c = 0; c < s.C; ++c) mean_abs += std::fabs(dy[r * s.C + c] * w[c] * x[r * s.C + c] * rstd[r]);
      mean_abs /= s.C;
      for (int c = 0; c < s.C; ++c) {
        const long i = static_cast<long>(r) * s.C + c;
        const double g = std::fabs(dy[i] * w[c]), xhat = std::fabs(x[i] * rstd[r]);
        dx_atol = std::max(dx_atol, (s.C + 8) * u_f * rstd[r] * (g + xhat * mean_abs) + 2 * u_f * std::fabs(dx[i]));
        dw_abs[c] += std::fabs(dy[i]) * xhat;
      }
    }
    double dw_atol = 0;
    for (int c = 0; c < s.C; ++c) dw_atol = std::max(dw_atol, (s.R + 3) * u_f * dw_abs[c]);

    ref_backward(x, w, rstd, dy, s.R, s.C, beta, dx, dw);
    std::vector<double> got_dx = dx_dev.host(), got_dw = dw_dev.host();
    expect_guard_untouched(got_dx, n, "rmsnorm_backward dx");
    expect_guard_untouched(got_dw, s.C, "rmsnorm_backward dw");
    got_dx.resize(n);
    got_dw.resize(s.C);
    expect_close(got_dx, dx, unit_roundoff<T>(), dx_atol, beta == 0 ? "rmsnorm_backward dx (beta 0)"
                                                                    : "rmsnorm_backward dx (beta 1)");
    expect_close(got_dw, dw, 0.0, dw_atol, "rmsnorm_backward dw");
  }
}

TYPED_TEST(RmsnormKernel, BackwardOverwritesPoisonedDxWhenBetaIsZero) { check_backward<TypeParam>(0.0f); }
TYPED_TEST(RmsnormKernel, BackwardAddsIntoDxWhenBetaIsOne) { check_backward<TypeParam>(1.0f); }

}  // namespace
}  // namespace shardrl
