// SwiGLU forward/backward kernels against an fp64 host reference, for float and bf16; the
// reference backward is itself checked against finite differences of the reference forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/swiglu.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::expect_guard_untouched;
using test::kGuard;
using test::unit_roundoff;

// Counts N * F, odd ones included. g spans [-8, 8) so both tails of the sigmoid are exercised.
const long kCounts[] = {1, 7, 64, 129, 37 * 129};
constexpr double kGateRange = 8.0;

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }
double ref_a(double g, double u) { return g * sigmoid(g) * u; }
double ref_dg(double g, double u, double da) { return da * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))); }
double ref_du(double g, double da) { return da * g * sigmoid(g); }

TEST(SwigluReference, BackwardMatchesFiniteDifferences) {
  const std::vector<double> g = random_values<double>(9, 1, -kGateRange, kGateRange), u = random_values<double>(9, 2),
                            da = random_values<double>(9, 3);
  const double h = 1e-6;   // central differences: O(h^2) + O(1e-16 / h)
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double fd_g = da[i] * (ref_a(g[i] + h, u[i]) - ref_a(g[i] - h, u[i])) / (2 * h);
    const double fd_u = da[i] * (ref_a(g[i], u[i] + h) - ref_a(g[i], u[i] - h)) / (2 * h);
    EXPECT_NEAR(ref_dg(g[i], u[i], da[i]), fd_g, 1e-8) << "g = " << g[i];
    EXPECT_NEAR(ref_du(g[i], da[i]), fd_u, 1e-8) << "g = " << g[i];
  }
}

template <class T>
class SwigluKernel : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(SwigluKernel, KernelTypes);

TYPED_TEST(SwigluKernel, Forward) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 10;
  for (long n : kCounts) {
    std::vector<double> g, u;
    Buffer<T> g_dev = random_buffer<T>(n, ++seed, &g, -kGateRange, kGateRange);
    Buffer<T> u_dev = random_buffer<T>(n, ++seed, &u);
    Buffer<T> a(n + kGuard);
    a.poison();
    kernels::swiglu_forward<T>(space, g_dev.data(), u_dev.data(), a.data(), n);
    std::vector<double> want(n);
    for (long i = 0; i < n; ++i) want[i] = ref_a(g[i], u[i]);
    std::vector<double> got = a.host();
    expect_guard_untouched(got, n, "swiglu_forward");
    got.resize(n);
    // Every step is a product or quotient, so errors are relative: expf (<= 2 ulp on GPU), the
    // +1 and the division give ~4 u_f in sigmoid, two products 2 u_f more; 8 u_f with margin,
    // plus u_T for the rounding of the result to T.
    expect_close(got, want, unit_roundoff<T>() + 8 * unit_roundoff<float>(), 0.0, "swiglu_forward");
  }
}

TYPED_TEST(SwigluKernel, Backward) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 40;
  for (long n : kCounts) {
    std::vector<double> g, u, da;
    Buffer<T> g_dev = random_buffer<T>(n, ++seed, &g, -kGateRange, kGateRange);
    Buffer<T> u_dev = random_buffer<T>(n, ++seed, &u);
    Buffer<T> da_dev = random_buffer<T>(n, ++seed, &da);
    Buffer<T> dg(n + kGuard), du(n + kGuard);
    dg.poison();
    du.poison();
    kernels::swiglu_backward<T>(space, g_dev.data(), u_dev.data(), da_dev.data(), dg.data(), du.data(), n);
    std::vector<double> want_dg(n), want_du(n);
    // dg: 1 + g (1 - sig) cancels (silu' = 0 near g = -1.28) and 1 - sig cancels for large g,
    // so its error is absolute: ~8 u_f * |da u sig| * (1 + |g|); 16 u_f with margin. The
    // largest such bound over the inputs is the atol; rtol u_T for the final rounding.
    double dg_atol = 0;
    for (long i = 0; i < n; ++i) {
      want_dg[i] = ref_dg(g[i], u[i], da[i]);
      want_du[i] = ref_du(g[i], da[i]);
      dg_atol = std::max(dg_atol, 16 * unit_roundoff<float>() * std::fabs(da[i] * u[i] * sigmoid(g[i])) *
                                      (1 + std::fabs(g[i])));
    }
    std::vector<double> got_dg = dg.host(), got_du = du.host();
    expect_guard_untouched(got_dg, n, "swiglu_backward dg");
    expect_guard_untouched(got_du, n, "swiglu_backward du");
    got_dg.resize(n);
    got_du.resize(n);
    expect_close(got_dg, want_dg, unit_roundoff<T>(), dg_atol, "swiglu_backward dg");
    // du = da * g * sig: relative error as in the forward.
    expect_close(got_du, want_du, unit_roundoff<T>() + 8 * unit_roundoff<float>(), 0.0, "swiglu_backward du");
  }
}

}  // namespace
}  // namespace shardrl
