// Element-wise kernels (cast, add_scaled, scale, fill) against fp64 host references, for every
// float/bf16 combination the model uses. Rounding to bf16 is checked against an independent
// round-to-nearest-even, including exact ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/elementwise.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::expect_guard_untouched;
using test::kGuard;
using test::unit_roundoff;

const long kCounts[] = {1, 7, 64, 129, 37 * 129};

// Nearest bf16 (8 significant bits) to v, ties to even; written without core/bf16.hpp so the
// kernel's rounding is checked against a second implementation. Normal range only.
double round_to_bf16(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);                        // |v| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 8);
  return std::nearbyint(v / ulp) * ulp;     // default rounding mode: ties to even
}
template <class T>
double round_to(double v) {
  return std::is_same_v<T, bf16> ? round_to_bf16(static_cast<float>(v)) : static_cast<float>(v);
}

template <class A, class B>
struct TypePair {
  using First = A;
  using Second = B;
};
using TypePairs = ::testing::Types<TypePair<float, bf16>, TypePair<bf16, float>, TypePair<float, float>,
                                   TypePair<bf16, bf16>>;

template <class P>
class CastKernel : public ::testing::Test {};
TYPED_TEST_SUITE(CastKernel, TypePairs);

TYPED_TEST(CastKernel, RoundsToNearestEven) {
  using From = typename TypeParam::First;
  using To = typename TypeParam::Second;
  ExecSpace space;
  std::uint64_t seed = 10;
  for (long n : kCounts) {
    std::vector<double> in = random_values<From>(n, ++seed, -4.0, 4.0);
    // Exact halfway cases between neighbouring bf16 values (representable in float): the
    // first two round down to even, the next two up to even.
    const double ties[] = {1 + 0x1p-8, -(1 + 0x1p-8), 1 + 3 * 0x1p-8, 0x1p-20 * (1 + 3 * 0x1p-8)};
    if (std::is_same_v<From, float>)
      for (long i = 0; i < n && i < 4; ++i) in[i] = ties[i];
    Buffer<From> in_dev(n);
    in_dev.set(in);
    Buffer<To> out(n + kGuard);
    out.poison();
    kernels::cast<From, To>(space, in_dev.data(), out.data(), n);
    std::vector<double> want(n);
    for (long i = 0; i < n; ++i) want[i] = round_to<To>(in[i]);
    std::vector<double> got = out.host();
    expect_guard_untouched(got, n, "cast");
    got.resize(n);
    // One correctly rounded conversion (or an exact one): tolerance 0.
    expect_close(got, want, 0.0, 0.0, "cast");
  }
}

template <class P>
class AddScaledKernel : public ::testing::Test {};
TYPED_TEST_SUITE(AddScaledKernel, TypePairs);

TYPED_TEST(AddScaledKernel, AddsScaledX) {
  using TX = typename TypeParam::First;
  using TY = typename TypeParam::Second;
  ExecSpace space;
  std::uint64_t seed = 40;
  for (float alpha : {-0.75f, 2.5f}) {
    for (long n : kCounts) {
      std::vector<double> x, y;
      Buffer<TX> x_dev = random_buffer<TX>(n, ++seed, &x);
      y = random_values<TY>(n, ++seed);
      std::vector<double> y_init = y;
      y_init.resize(n + kGuard, std::nan(""));
      Buffer<TY> y_dev(n + kGuard);
      y_dev.set(y_init);
      kernels::add_scaled<TX, TY>(space, x_dev.data(), y_dev.data(), alpha, n);
      std::vector<double> want(n);
      for (long i = 0; i < n; ++i) want[i] = y[i] + static_cast<double>(alpha) * x[i];
      std::vector<double> got = y_dev.host();
      expect_guard_untouched(got, n, "add_scaled");
      got.resize(n);
      // fp32 product and sum round once each, and the sum may cancel, so that error is absolute:
      // 2 u_f * (|y| + |alpha x|) with |x|, |y| < 1; then rtol u_TY for the rounding to TY.
      const double atol = 2 * unit_roundoff<float>() * (1 + std::fabs(alpha));
      expect_close(got, want, unit_roundoff<TY>(), atol, "add_scaled");
    }
  }
}

template <class T>
class SingleTypeKernel : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(SingleTypeKernel, KernelTypes);

TYPED_TEST(SingleTypeKernel, Scale) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 70;
  const float alpha = 0.37f;
  for (long n : kCounts) {
    std::vector<double> x = random_values<T>(n, ++seed);
    std::vector<double> x_init = x;
    x_init.resize(n + kGuard, std::nan(""));
    Buffer<T> x_dev(n + kGuard);
    x_dev.set(x_init);
    kernels::scale<T>(space, x_dev.data(), alpha, n);
    std::vector<double> want(n);
    for (long i = 0; i < n; ++i) want[i] = static_cast<double>(alpha) * x[i];
    std::vector<double> got = x_dev.host();
    expect_guard_untouched(got, n, "scale");
    got.resize(n);
    // One fp32 product (u_f) and one rounding to T (u_T), both relative.
    expect_close(got, want, unit_roundoff<T>() + unit_roundoff<float>(), 0.0, "scale");
  }
}

TYPED_TEST(SingleTypeKernel, Fill) {
  using T = TypeParam;
  ExecSpace space;
  const float value = 0.3f;   // not representable: the kernel must round it to T
  for (long n : kCounts) {
    Buffer<T> x(n + kGuard);
    x.poison();
    kernels::fill<T>(space, x.data(), value, n);
    std::vector<double> got = x.host();
    expect_guard_untouched(got, n, "fill");
    got.resize(n);
    // T(value) is one correctly rounded conversion: tolerance 0.
    expect_close(got, std::vector<double>(n, round_to<T>(value)), 0.0, 0.0, "fill");
  }
}

}  // namespace
}  // namespace shardrl
