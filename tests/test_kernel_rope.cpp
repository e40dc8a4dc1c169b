// RoPE forward/backward kernels against an fp64 host reference, for float and bf16: rotation
// values, backward as the inverse of forward, position 0 as identity, odd head dim rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/rope.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::unit_roundoff;

struct Shape {
  int N, n_heads, hd;
  float theta;
};
const Shape kShapes[] = {{1, 1, 2, 1e4f}, {3, 2, 8, 1e6f}, {7, 1, 6, 1e4f}, {37, 3, 64, 1e4f}, {5, 2, 128, 1e6f}};
constexpr int kMaxPosition = 64;   // positions in [0, kMaxPosition)

// Token 0 at position 0, the others random.
std::vector<double> random_positions(int N, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> dist(0, kMaxPosition - 1);
  std::vector<double> p(N);
  for (auto& v : p) v = dist(gen);
  p[0] = 0;
  return p;
}

Buffer<std::int32_t> position_buffer(const std::vector<double>& positions) {
  Buffer<std::int32_t> b(static_cast<long>(positions.size()), "positions");
  b.set(positions);
  return b;
}

// fp64 reference of the rotation by sign * angle. The angle is formed in fp32 exactly as HF
// does (that is the convention being matched); sin, cos and the rotation are fp64.
std::vector<double> ref_rotate(const std::vector<double>& x, const std::vector<double>& positions, int n_heads,
                               int hd, float theta, double sign) {
  std::vector<double> y(x.size());
  const int half = hd / 2;
  for (std::size_t n = 0; n < positions.size(); ++n)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < half; ++i) {
        const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
        const double angle = static_cast<float>(static_cast<float>(positions[n]) * inv_freq);
        const double c = std::cos(angle), s = sign * std::sin(angle);
        const long i0 = (static_cast<long>(n) * n_heads + h) * hd + i, i1 = i0 + half;
        y[i0] = x[i0] * c - x[i1] * s;
        y[i1] = x[i1] * c + x[i0] * s;
      }
  return y;
}

TEST(RopeReference, BackwardMatchesFiniteDifferences) {
  // L = sum dy * rope(x); rope is linear in x, so central differences are exact up to roundoff.
  const int n_heads = 2, hd = 6;
  const float theta = 1e4f;
  const std::vector<double> positions = {3, 17};
  const long n = 2L * n_heads * hd;
  const std::vector<double> x = random_values<double>(n, 1), dy = random_values<double>(n, 2);
  auto loss = [&](const std::vector<double>& xv) {
    std::vector<double> y = ref_rotate(xv, positions, n_heads, hd, theta, 1.0);
    double l = 0;
    for (long i = 0; i < n; ++i) l += dy[i] * y[i];
    return l;
  };
  const std::vector<double> dx = ref_rotate(dy, positions, n_heads, hd, theta, -1.0);
  const double h = 1e-4;
  for (long i = 0; i < n; ++i) {
    std::vector<double> xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR(dx[i], (loss(xp) - loss(xm)) / (2 * h), 1e-9) << "element " << i;
  }
}

template <class T>
class RopeKernel : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(RopeKernel, KernelTypes);

// |x| < 1, so every output is below sqrt(2) in magnitude. Tolerance: rtol u_T for the final
// rounding to T; atol 8 u_f for sinf/cosf and the fp32 rotation, plus 8 * kMaxPosition * u_f
// because a device powf may differ from the host's by a few ulp, which moves an angle of up to
// kMaxPosition radians by that many ulp of inv_freq times the position.
template <class T>
void check_rotation(float sign) {
  ExecSpace space;
  const double u_f = unit_roundoff<float>();
  const double atol = (8.0 + 8.0 * kMaxPosition) * u_f;
  std::uint64_t seed = sign > 0 ? 10 : 40;
  for (const Shape& s : kShapes) {
    const long n = static_cast<long>(s.N) * s.n_heads * s.hd;
    std::vector<double> x;
    std::vector<double> positions = random_positions(s.N, ++seed);
    Buffer<T> x_dev = random_buffer<T>(n, ++seed, &x);
    Buffer<std::int32_t> pos_dev = position_buffer(positions);
    if (sign > 0)
      kernels::rope_forward<T>(space, x_dev.data(), pos_dev.data(), s.N, s.n_heads, s.hd, s.theta);
    else
      kernels::rope_backward<T>(space, x_dev.data(), pos_dev.data(), s.N, s.n_heads, s.hd, s.theta);
    expect_close(x_dev.host(), ref_rotate(x, positions, s.n_heads, s.hd, s.theta, sign), unit_roundoff<T>(), atol,
                 sign > 0 ? "rope_forward" : "rope_backward");
  }
}

TYPED_TEST(RopeKernel, Forward) { check_rotation<TypeParam>(1.0f); }
TYPED_TEST(RopeKernel, Backward) { check_rotation<TypeParam>(-1.0f); }

TYPED_TEST(RopeKernel, BackwardUndoesForward) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 70;
  for (const Shape& s : kShapes) {
    const long n = static_cast<long>(s.N) * s.n_heads * s.hd;
    std::vector<double> x;
    Buffer<T> x_dev = random_buffer<T>(n, ++seed, &x);
    Buffer<std::int32_t> pos_dev = position_buffer(random_positions(s.N, ++seed));
    kernels::rope_forward<T>(space, x_dev.data(), pos_dev.data(), s.N, s.n_heads, s.hd, s.theta);
    kernels::rope_backward<T>(space, x_dev.data(), pos_dev.data(), s.N, s.n_heads, s.hd, s.theta);
    // The same angle is used both ways, so only rounding remains: the forward's rounding to T
    // (<= sqrt(2) u_T per pair, carried unchanged through the orthogonal backward), the
    // backward's own (u_T), and fp32 arithmetic: 4 u_T + 32 u_f.
    const double atol = 4 * unit_roundoff<T>() + 32 * unit_roundoff<float>();
    expect_close(x_dev.host(), x, 0.0, atol, "rope backward(forward(x))");
  }
}

TYPED_TEST(RopeKernel, PositionZeroIsIdentity) {
  using T = TypeParam;
  ExecSpace space;
  const Shape s = {5, 3, 64, 1e6f};
  const long n = static_cast<long>(s.N) * s.n_heads * s.hd;
  std::vector<double> x;
  Buffer<T> x_dev = random_buffer<T>(n, 90, &x);
  Buffer<std::int32_t> pos_dev = position_buffer(std::vector<double>(s.N, 0.0));
  // cos 0 = 1 and sin 0 = 0 exactly, so the values must come back bit for bit: tolerance 0.
  kernels::rope_forward<T>(space, x_dev.data(), pos_dev.data(), s.N, s.n_heads, s.hd, s.theta);
  expect_close(x_dev.host(), x, 0.0, 0.0, "rope_forward at position 0");
  kernels::rope_backward<T>(space, x_dev.data(), pos_dev.data(), s.N, s.n_heads, s.hd, s.theta);
  expect_close(x_dev.host(), x, 0.0, 0.0, "rope_backward at position 0");
}

TEST(RopeKernelDeathTest, OddHeadDimIsRejected) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";   // fork-safe with a GPU runtime
  Buffer<float> x(3);
  Buffer<std::int32_t> pos = position_buffer({0.0});
  EXPECT_DEATH(kernels::rope_forward<float>(ExecSpace(), x.data(), pos.data(), 1, 1, 3, 1e4f), "even head dim");
}

}  // namespace
}  // namespace shardrl
