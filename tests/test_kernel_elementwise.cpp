// Element-wise kernels (cast, add_scaled, scale, fill) against fp64 host references, for every
// float/bf16 combination the model uses. Rounding to bf16 is checked against an independent
// round-to-nearest-even, including exact ties. The packed kernels are also compared bit for bit
// with their one-element form, at aligned and misaligned pointers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/elementwise.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::buffer_at;
using test::expect_same_bits;
using test::expect_untouched_outside;
using test::poisoned_at;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::expect_guard_untouched;
using test::kGuard;
using test::unit_roundoff;

// Odd counts and ones past a multiple of the pack width (8 * k + 3) included.
const long kCounts[] = {1, 7, 64, 129, 8 * 37 + 3, 37 * 129};

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

// The kernels as they were before packing, one element per work item: the packed kernels (and
// the copies that replace same-type casts) must give these bits, on CPU and GPU alike.
namespace one_element {

template <class From, class To>
void cast(const ExecSpace& space, const From* in, To* out, long count) {
  Kokkos::parallel_for(
      "cast_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, count),
      KOKKOS_LAMBDA(const long i) { out[i] = To(static_cast<float>(in[i])); });
}

template <class TX, class TY>
void add_scaled(const ExecSpace& space, const TX* x, TY* y, float alpha, long count) {
  Kokkos::parallel_for(
      "add_scaled_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        y[i] = TY(static_cast<float>(y[i]) + alpha * static_cast<float>(x[i]));
      });
}

template <class T>
void scale(const ExecSpace& space, T* x, float alpha, long count) {
  Kokkos::parallel_for(
      "scale_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, count),
      KOKKOS_LAMBDA(const long i) { x[i] = T(alpha * static_cast<float>(x[i])); });
}

}  // namespace one_element

// Offset 0 takes the packed path (the allocation is 16-byte aligned), offset 1 the one-element
// path. Input and output offsets are varied apart, since one misaligned pointer is enough to
// leave the packed path.
struct Offsets {
  long in, out;
};
const Offsets kOffsets[] = {{0, 0}, {1, 1}, {0, 1}, {1, 0}};

std::string case_name(const char* kernel, long n, Offsets off) {
  return std::string(kernel) + ", n " + std::to_string(n) + ", offsets " + std::to_string(off.in) + "/" +
         std::to_string(off.out);
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

// Special values as well: signed zeros, infinities, NaN, a float subnormal, the largest floats.
TYPED_TEST(CastKernel, HasTheBitsOfTheOneElementKernel) {
  using From = typename TypeParam::First;
  using To = typename TypeParam::Second;
  ExecSpace space;
  std::uint64_t seed = 30;
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, 3.0e38, -3.0e38};
  for (long n : kCounts) {
    std::vector<double> in = random_values<From>(n, ++seed, -4.0, 4.0);
    for (long i = 0; i < n && i < 8; ++i) in[(i * 37) % n] = static_cast<float>(From(static_cast<float>(specials[i])));
    Buffer<To> want(n);
    {
      Buffer<From> in0 = buffer_at<From>(0, in);
      one_element::cast<From, To>(space, in0.data(), want.data(), n);
    }
    for (Offsets off : kOffsets) {
      Buffer<From> in_dev = buffer_at<From>(off.in, in);
      Buffer<To> out = poisoned_at<To>(off.out, n);
      kernels::cast<From, To>(space, in_dev.data() + off.in, out.data() + off.out, n);
      const std::string what = case_name("cast", n, off);
      expect_untouched_outside(out.host(), off.out, n, what);
      expect_same_bits(out.data() + off.out, want.data(), n, what);
    }
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

TYPED_TEST(AddScaledKernel, HasTheBitsOfTheOneElementKernel) {
  using TX = typename TypeParam::First;
  using TY = typename TypeParam::Second;
  ExecSpace space;
  std::uint64_t seed = 60;
  const float alpha = -0.75f;
  for (long n : kCounts) {
    const std::vector<double> x = random_values<TX>(n, ++seed), y = random_values<TY>(n, ++seed);
    Buffer<TY> want = buffer_at<TY>(0, y);
    {
      Buffer<TX> x0 = buffer_at<TX>(0, x);
      one_element::add_scaled<TX, TY>(space, x0.data(), want.data(), alpha, n);
    }
    for (Offsets off : kOffsets) {
      Buffer<TX> x_dev = buffer_at<TX>(off.in, x);
      Buffer<TY> y_dev = buffer_at<TY>(off.out, y);
      kernels::add_scaled<TX, TY>(space, x_dev.data() + off.in, y_dev.data() + off.out, alpha, n);
      const std::string what = case_name("add_scaled", n, off);
      expect_untouched_outside(y_dev.host(), off.out, n, what);
      expect_same_bits(y_dev.data() + off.out, want.data(), n, what);
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

TYPED_TEST(SingleTypeKernel, ScaleHasTheBitsOfTheOneElementKernel) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 90;
  const float alpha = 0.37f;
  for (long n : kCounts) {
    const std::vector<double> x = random_values<T>(n, ++seed);
    Buffer<T> want = buffer_at<T>(0, x);
    one_element::scale<T>(space, want.data(), alpha, n);
    for (long off : {0L, 1L}) {
      Buffer<T> x_dev = buffer_at<T>(off, x);
      kernels::scale<T>(space, x_dev.data() + off, alpha, n);
      const std::string what = case_name("scale", n, {off, off});
      expect_untouched_outside(x_dev.host(), off, n, what);
      expect_same_bits(x_dev.data() + off, want.data(), n, what);
    }
  }
}

// Zero (a memset) and a value (the packed kernel), at aligned and misaligned pointers.
TYPED_TEST(SingleTypeKernel, FillWritesExactlyItsRange) {
  using T = TypeParam;
  ExecSpace space;
  for (float value : {0.0f, 0.3f}) {
    for (long n : kCounts) {
      for (long off : {0L, 1L}) {
        Buffer<T> x = poisoned_at<T>(off, n);
        kernels::fill<T>(space, x.data() + off, value, n);
        const std::string what = case_name("fill", n, {off, off}) + ", value " + std::to_string(value);
        std::vector<double> got = x.host();
        expect_untouched_outside(got, off, n, what);
        got = std::vector<double>(got.begin() + off, got.begin() + off + n);
        expect_close(got, std::vector<double>(n, round_to<T>(value)), 0.0, 0.0, what);
      }
    }
  }
}

}  // namespace
}  // namespace shardrl
