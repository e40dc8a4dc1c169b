// SwiGLU forward/backward kernels against an fp64 host reference, for float and bf16; the
// reference backward is itself checked against finite differences of the reference forward. The
// packed kernels are also compared bit for bit with their one-element form, at aligned and
// misaligned pointers, and the backward's recomputed activation with the forward's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/swiglu.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::buffer_at;
using test::expect_same_bits;
using test::expect_untouched_outside;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::expect_guard_untouched;
using test::kGuard;
using test::poisoned_at;
using test::unit_roundoff;

// Counts N * F, odd ones and ones past a multiple of the pack width (8 * k + 3) included. g spans
// [-8, 8) so both tails of the sigmoid are exercised.
const long kCounts[] = {1, 7, 64, 129, 8 * 37 + 3, 37 * 129};
constexpr double kGateRange = 8.0;

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }
double ref_a(double g, double u) { return g * sigmoid(g) * u; }
double ref_dg(double g, double u, double da) { return da * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))); }
double ref_du(double g, double da) { return da * g * sigmoid(g); }

// The kernels as they were before packing, one element per work item: the packed kernels must
// give these bits, on CPU and GPU alike.
namespace one_element {

template <class T>
void swiglu_forward(const ExecSpace& space, const T* g, const T* u, T* a, long count) {
  Kokkos::parallel_for(
      "swiglu_forward_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const float gv = static_cast<float>(g[i]);
        const float sig = 1.0f / (1.0f + expf(-gv));
        a[i] = T(gv * sig * static_cast<float>(u[i]));
      });
}

template <class T>
void swiglu_backward(const ExecSpace& space, const T* g, const T* u, const T* da, T* dg, T* du, long count) {
  Kokkos::parallel_for(
      "swiglu_backward_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const float gv = static_cast<float>(g[i]);
        const float dav = static_cast<float>(da[i]);
        const float sig = 1.0f / (1.0f + expf(-gv));
        dg[i] = T(dav * static_cast<float>(u[i]) * sig * (1.0f + gv * (1.0f - sig)));
        du[i] = T(dav * gv * sig);
      });
}

}  // namespace one_element

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

// Offset 0 takes the packed path (the allocation is 16-byte aligned), offset 1 the one-element
// path; both must give the one-element kernel's bits, and write nothing outside their range.
const long kOffsets[] = {0, 1};

TYPED_TEST(SwigluKernel, ForwardHasTheBitsOfTheOneElementKernel) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 70;
  for (long n : kCounts) {
    const std::vector<double> g = random_values<T>(n, ++seed, -kGateRange, kGateRange), u = random_values<T>(n, ++seed);
    Buffer<T> want(n);
    {
      Buffer<T> g0 = buffer_at<T>(0, g), u0 = buffer_at<T>(0, u);
      one_element::swiglu_forward<T>(space, g0.data(), u0.data(), want.data(), n);
    }
    for (long off : kOffsets) {
      Buffer<T> g_dev = buffer_at<T>(off, g), u_dev = buffer_at<T>(off, u), a = poisoned_at<T>(off, n);
      ASSERT_EQ(kernels::packs_aligned(a.data() + off), off == 0);
      kernels::swiglu_forward<T>(space, g_dev.data() + off, u_dev.data() + off, a.data() + off, n);
      const std::string what = "swiglu_forward, n " + std::to_string(n) + ", offset " + std::to_string(off);
      expect_untouched_outside(a.host(), off, n, what);
      expect_same_bits(a.data() + off, want.data(), n, what);
    }
  }
}

TYPED_TEST(SwigluKernel, BackwardHasTheBitsOfTheOneElementKernelAndRecomputesTheForward) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 100;
  for (long n : kCounts) {
    const std::vector<double> g = random_values<T>(n, ++seed, -kGateRange, kGateRange), u = random_values<T>(n, ++seed),
                              da = random_values<T>(n, ++seed);
    Buffer<T> want_dg(n), want_du(n), want_a(n);
    {
      Buffer<T> g0 = buffer_at<T>(0, g), u0 = buffer_at<T>(0, u), da0 = buffer_at<T>(0, da);
      one_element::swiglu_backward<T>(space, g0.data(), u0.data(), da0.data(), want_dg.data(), want_du.data(), n);
      kernels::swiglu_forward<T>(space, g0.data(), u0.data(), want_a.data(), n);
    }
    for (long off : kOffsets) {
      for (bool with_a : {false, true}) {
        Buffer<T> g_dev = buffer_at<T>(off, g), u_dev = buffer_at<T>(off, u), da_dev = buffer_at<T>(off, da);
        Buffer<T> dg = poisoned_at<T>(off, n), du = poisoned_at<T>(off, n), a = poisoned_at<T>(off, n);
        kernels::swiglu_backward<T>(space, g_dev.data() + off, u_dev.data() + off, da_dev.data() + off,
                                    dg.data() + off, du.data() + off, n, with_a ? a.data() + off : nullptr);
        const std::string what = "swiglu_backward, n " + std::to_string(n) + ", offset " + std::to_string(off) +
                                 (with_a ? ", with a" : "");
        expect_untouched_outside(dg.host(), off, n, what + ": dg");
        expect_untouched_outside(du.host(), off, n, what + ": du");
        expect_same_bits(dg.data() + off, want_dg.data(), n, what + ": dg");
        expect_same_bits(du.data() + off, want_du.data(), n, what + ": du");
        if (with_a) {
          expect_untouched_outside(a.host(), off, n, what + ": a");
          expect_same_bits(a.data() + off, want_a.data(), n, what + ": a against swiglu_forward");
        } else {
          expect_untouched_outside(a.host(), off, 0, what + ": a not asked for");
        }
      }
    }
  }
}

// A decode step whose gate and up ran as one GEMM reads rows of (g | u): the bits of
// swiglu_forward over buffers of their own, F a multiple of the pack width (packed) or not.
TYPED_TEST(SwigluKernel, RowsOfOneProductGiveTheSameBits) {
  using T = TypeParam;
  ExecSpace space;
  for (const long F : {64L, 37L}) {
    const long rows = 5, n = rows * F;
    const std::vector<double> g = random_values<T>(n, 90 + F, -kGateRange, kGateRange), u = random_values<T>(n, 91 + F);
    std::vector<double> gu;
    for (long r = 0; r < rows; ++r) {
      gu.insert(gu.end(), g.begin() + r * F, g.begin() + (r + 1) * F);
      gu.insert(gu.end(), u.begin() + r * F, u.begin() + (r + 1) * F);
    }
    Buffer<T> g_dev = buffer_at<T>(0, g), u_dev = buffer_at<T>(0, u), gu_dev = buffer_at<T>(0, gu);
    Buffer<T> want(n), got(n + kGuard);
    got.poison();
    kernels::swiglu_forward<T>(space, g_dev.data(), u_dev.data(), want.data(), n);
    kernels::swiglu_forward_rows<T>(space, gu_dev.data(), got.data(), rows, F);
    const std::string what = "swiglu_forward_rows, F " + std::to_string(F);
    expect_guard_untouched(got.host(), n, what.c_str());
    expect_same_bits(got.data(), want.data(), n, what);
  }
}

}  // namespace
}  // namespace shardrl
