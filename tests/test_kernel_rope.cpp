// RoPE forward/backward kernels against an fp64 host reference, for float and bf16, plain and
// with Llama 3's frequency scaling: rotation values, backward as the inverse of forward,
// position 0 as identity, odd head dim rejected.
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
  kernels::RopeFrequencies freq;
};
kernels::RopeFrequencies plain(float theta) {
  kernels::RopeFrequencies f;
  f.theta = theta;
  return f;
}
// Llama 3.2's scaling (factor 32, low 1, high 4, 8192 positions), and one whose wavelength bands
// a short head spans: with hd = 64 and theta 5e5 the wavelengths run from 2 pi to ~2e6, through
// all three bands (kept below 2048, divided above 8192, interpolated between).
kernels::RopeFrequencies llama3(float theta, float factor, float original) {
  kernels::RopeFrequencies f = plain(theta);
  f.scaling_factor = factor;
  f.original_max_position = original;
  return f;
}
const Shape kShapes[] = {{1, 1, 2, plain(1e4f)},   {3, 2, 8, plain(1e6f)},   {7, 1, 6, plain(1e4f)},
                         {37, 3, 64, plain(1e4f)}, {5, 2, 128, plain(1e6f)}, {9, 2, 64, llama3(5e5f, 32, 8192)},
                         {6, 1, 128, llama3(5e5f, 8, 8192)}, {4, 2, 16, llama3(1e4f, 4, 64)}};
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

// inv_freq as transformers computes it in fp32 (_compute_default_rope_parameters and, for
// rope_type "llama3", _compute_llama3_parameters), written out here independently of the kernel.
// The batch's rotation table on the device, formed as the model forms it (once per batch).
Buffer<float> rope_table_for(const Buffer<std::int32_t>& positions, int N, int hd, const kernels::RopeFrequencies& f) {
  Buffer<float> table(static_cast<long>(N) * hd);
  kernels::rope_table(ExecSpace(), positions.data(), N, hd, f, table.data());
  return table;
}

float ref_inv_freq(const kernels::RopeFrequencies& f, int i, int hd) {
  const float base = 1.0f / std::pow(f.theta, static_cast<float>(2 * i) / static_cast<float>(hd));
  if (f.scaling_factor <= 0) return base;
  const float low_freq_wavelen = f.original_max_position / f.low_freq_factor;
  const float high_freq_wavelen = f.original_max_position / f.high_freq_factor;
  const float wavelen = 2.0f * static_cast<float>(M_PI) / base;
  float scaled = wavelen > low_freq_wavelen ? base / f.scaling_factor : base;
  const float smooth = (f.original_max_position / wavelen - f.low_freq_factor) / (f.high_freq_factor - f.low_freq_factor);
  const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
  if (medium) scaled = (1 - smooth) * scaled / f.scaling_factor + smooth * scaled;
  return scaled;
}

// fp64 reference of the rotation by sign * angle. The angle is formed in fp32 exactly as HF
// does (that is the convention being matched); sin, cos and the rotation are fp64.
std::vector<double> ref_rotate(const std::vector<double>& x, const std::vector<double>& positions, int n_heads,
                               int hd, const kernels::RopeFrequencies& freq, double sign) {
  std::vector<double> y(x.size());
  const int half = hd / 2;
  for (std::size_t n = 0; n < positions.size(); ++n)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < half; ++i) {
        const float inv_freq = ref_inv_freq(freq, i, hd);
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
  const kernels::RopeFrequencies theta = plain(1e4f);
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
    const Buffer<float> table = rope_table_for(pos_dev, s.N, s.hd, s.freq);
    if (sign > 0)
      kernels::rope_forward<T>(space, x_dev.data(), table.data(), s.N, s.n_heads, s.hd);
    else
      kernels::rope_backward<T>(space, x_dev.data(), table.data(), s.N, s.n_heads, s.hd);
    expect_close(x_dev.host(), ref_rotate(x, positions, s.n_heads, s.hd, s.freq, sign), unit_roundoff<T>(), atol,
                 sign > 0 ? "rope_forward" : "rope_backward");
  }
}

TYPED_TEST(RopeKernel, Forward) { check_rotation<TypeParam>(1.0f); }

// The three bands of Llama 3's scaling, on Llama 3.2's numbers (theta 5e5, factor 32, low 1,
// high 4, 8192 positions): a short wavelength is kept, a long one divided by the factor, one
// between interpolated (strictly between the two).
TEST(RopeFrequencies, Llama3ScalingBands) {
  const kernels::RopeFrequencies f = llama3(5e5f, 32, 8192);
  const kernels::RopeFrequencies p = plain(5e5f);
  const int hd = 64;
  int kept = 0, divided = 0, between = 0;
  for (int i = 0; i < hd / 2; ++i) {
    const float wavelen = 2.0f * static_cast<float>(M_PI) / p.inv_freq(i, hd);
    if (wavelen < 2048) {
      EXPECT_EQ(f.inv_freq(i, hd), p.inv_freq(i, hd)) << i;
      ++kept;
    } else if (wavelen > 8192) {
      EXPECT_FLOAT_EQ(f.inv_freq(i, hd), p.inv_freq(i, hd) / 32) << i;
      ++divided;
    } else {
      EXPECT_LT(f.inv_freq(i, hd), p.inv_freq(i, hd)) << i;
      EXPECT_GT(f.inv_freq(i, hd), p.inv_freq(i, hd) / 32) << i;
      ++between;
    }
    EXPECT_EQ(f.inv_freq(i, hd), ref_inv_freq(f, i, hd)) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(between, 0);
}
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
    const Buffer<float> table = rope_table_for(pos_dev, s.N, s.hd, s.freq);
    kernels::rope_forward<T>(space, x_dev.data(), table.data(), s.N, s.n_heads, s.hd);
    kernels::rope_backward<T>(space, x_dev.data(), table.data(), s.N, s.n_heads, s.hd);
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
  const Shape s = {5, 3, 64, plain(1e6f)};
  const long n = static_cast<long>(s.N) * s.n_heads * s.hd;
  std::vector<double> x;
  Buffer<T> x_dev = random_buffer<T>(n, 90, &x);
  Buffer<std::int32_t> pos_dev = position_buffer(std::vector<double>(s.N, 0.0));
  // cos 0 = 1 and sin 0 = 0 exactly, so the values must come back bit for bit: tolerance 0.
  const Buffer<float> table = rope_table_for(pos_dev, s.N, s.hd, s.freq);
  kernels::rope_forward<T>(space, x_dev.data(), table.data(), s.N, s.n_heads, s.hd);
  expect_close(x_dev.host(), x, 0.0, 0.0, "rope_forward at position 0");
  kernels::rope_backward<T>(space, x_dev.data(), table.data(), s.N, s.n_heads, s.hd);
  expect_close(x_dev.host(), x, 0.0, 0.0, "rope_backward at position 0");
}

// A head whose half is a multiple of the pack width is rotated in packs of pairs; the same values
// one element off alignment are rotated pair by pair. Same arithmetic, so the same bits.
TYPED_TEST(RopeKernel, PackedAndPairByPairRotationsAgree) {
  using T = TypeParam;
  ExecSpace space;
  const Shape s = {9, 3, 64, llama3(5e5f, 32, 8192)};
  const long n = static_cast<long>(s.N) * s.n_heads * s.hd;
  std::vector<double> x;
  Buffer<T> aligned = random_buffer<T>(n, 95, &x);
  std::vector<double> shifted_values(1, 0.0);
  shifted_values.insert(shifted_values.end(), x.begin(), x.end());
  Buffer<T> shifted(n + 1);
  shifted.set(shifted_values);
  ASSERT_TRUE(kernels::packs_aligned(aligned.data()));
  ASSERT_FALSE(kernels::packs_aligned(shifted.data() + 1));
  Buffer<std::int32_t> pos_dev = position_buffer(random_positions(s.N, 96));
  const Buffer<float> table = rope_table_for(pos_dev, s.N, s.hd, s.freq);
  kernels::rope_forward<T>(space, aligned.data(), table.data(), s.N, s.n_heads, s.hd);
  kernels::rope_forward<T>(space, shifted.data() + 1, table.data(), s.N, s.n_heads, s.hd);
  std::vector<double> a = aligned.host(), b = shifted.host();
  b.erase(b.begin());
  ASSERT_EQ(a, b);
}

TEST(RopeKernelDeathTest, OddHeadDimIsRejected) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";   // fork-safe with a GPU runtime
  Buffer<float> x(3);
  Buffer<std::int32_t> pos = position_buffer({0.0});
  EXPECT_DEATH(kernels::rope_table(ExecSpace(), pos.data(), 1, 3, plain(1e4f), x.data()), "even head dim");
}

}  // namespace
}  // namespace shardrl
