// RMSNorm forward/backward kernels against an fp64 host reference, for float and bf16; the
// reference backward is itself checked against finite differences of the reference forward. The
// packed kernels are also checked bit for bit: against themselves at misaligned pointers (their
// one-element path), against the kernels as they were before packing where the arithmetic is the
// same, and y against its host recomputation from the kernel's rstd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/rmsnorm.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::buffer_at;
using test::device_elements;
using test::expect_same_bits;
using test::expect_untouched_outside;
using test::poisoned_at;
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
// 43 columns are 8 * 5 + 3 (no packs for either type), 12 whole float packs but no bf16 ones.
// The last two give the weight gradient several rows per chunk, and empty trailing chunks
// (kernels::rmsnorm_dw_chunks: 256 chunks of 4 rows for 1000 x 1024, 64 of 6 for 333 x 4096).
// Rows of up to 32 groups go several to a GPU team (kernels::detail::short_rows): 515 x 128 is
// a head norm's shape, its rows not a whole number of teams; 256 columns are 32 bf16 packs.
const Shape kShapes[] = {{1, 1, 1.0},     {3, 7, 1.0},    {37, 64, 1.0},     {5, 129, 1.0},    {4, 43, 1.0},
                         {6, 12, 1.0},    {3, 64, 1e-3},  {2, 2048, 1.0},    {1000, 1024, 1.0}, {333, 4096, 1.0},
                         {515, 128, 1.0}, {70, 256, 1.0}};
constexpr float kEps = 1e-6f;

// The kernels as they were before packing: one column per thread of a team, and per thread of
// the weight gradient's first pass.
namespace one_element {

template <class T>
void rmsnorm_forward(const ExecSpace& space, const T* x, const T* w, T* y, float* rstd, int R, int C, float eps) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "rmsnorm_forward_one_element", Kokkos::TeamPolicy<ExecSpace>(space, R, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long base = static_cast<long>(team.league_rank()) * C;
        float sum_sq = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](const int c, float& acc) {
              const float v = static_cast<float>(x[base + c]);
              acc += v * v;
            },
            sum_sq);
        const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(C) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int c) {
          y[base + c] = T(static_cast<float>(x[base + c]) * r * static_cast<float>(w[c]));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd[team.league_rank()] = r; });
      });
}

template <class T>
void rmsnorm_backward(const ExecSpace& space, const T* x, const T* w, const float* rstd, const T* dy, T* dx,
                      float* dw, int R, int C, float beta, float* scratch) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "rmsnorm_backward_dx_one_element", Kokkos::TeamPolicy<ExecSpace>(space, R, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long base = static_cast<long>(team.league_rank()) * C;
        const float r = rstd[team.league_rank()];
        float sum_gx = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](const int c, float& acc) {
              acc += static_cast<float>(dy[base + c]) * static_cast<float>(w[c]) * static_cast<float>(x[base + c]);
            },
            sum_gx);
        const float mean_gx = sum_gx * r / static_cast<float>(C);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int c) {
          const float g = static_cast<float>(dy[base + c]) * static_cast<float>(w[c]);
          const float xhat = static_cast<float>(x[base + c]) * r;
          const float d = r * (g - xhat * mean_gx);
          dx[base + c] = beta == 0.0f ? T(d) : T(beta * static_cast<float>(dx[base + c]) + d);
        });
      });
  const int chunks = kernels::rmsnorm_dw_chunks(R, C);
  const int rows_per_chunk = (R + chunks - 1) / chunks;
  Kokkos::parallel_for(
      "rmsnorm_backward_dw_chunks_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(chunks) * C),
      KOKKOS_LAMBDA(const long i) {
        const long k = i / C, c = i % C;
        const long first = k * rows_per_chunk;
        const long last = first + rows_per_chunk < R ? first + rows_per_chunk : R;
        float sum = 0.0f;
        for (long r = first; r < last; ++r)
          sum += static_cast<float>(dy[r * C + c]) * static_cast<float>(x[r * C + c]) * rstd[r];
        scratch[i] = sum;
      });
  Kokkos::parallel_for(
      "rmsnorm_backward_dw_one_element", Kokkos::RangePolicy<ExecSpace>(space, 0, C), KOKKOS_LAMBDA(const int c) {
        float sum = 0.0f;
        for (int k = 0; k < chunks; ++k) sum += scratch[static_cast<long>(k) * C + c];
        dw[c] += sum;
      });
}

}  // namespace one_element

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

// Where the kernels' pointers start: offset 0 is the allocation's 16-byte alignment, offset 1 one
// element past it. `rows` moves x, dy, y and dx, `w` the weight, `scratch` the dw scratch; any
// one of them misaligned leaves the packed path of the kernels that use it.
struct Offsets {
  long rows, w, scratch;
};
const Offsets kOffsets[] = {{0, 0, 0}, {1, 1, 0}, {0, 1, 0}, {0, 0, 1}};

std::string case_name(const char* kernel, const Shape& s, Offsets off) {
  return std::string(kernel) + ", " + std::to_string(s.R) + " x " + std::to_string(s.C) + ", offsets rows " +
         std::to_string(off.rows) + " w " + std::to_string(off.w) + " scratch " + std::to_string(off.scratch);
}

// rstd and y at every alignment have the bits of the aligned run; y has the bits of its host
// recomputation from that rstd (products only, so no contraction can differ). On one thread
// (Serial) a team adds a row left to right as before packing, so there rstd and y also have the
// bits of the kernel before packing; on GPUs a thread adds groups of pack-width columns rather
// than single ones, which may change rstd in its last bits (the fp64 checks above bound it).
TYPED_TEST(RmsnormKernel, ForwardBitsDoNotDependOnPacking) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 70;
  for (const Shape& s : kShapes) {
    const long n = static_cast<long>(s.R) * s.C;
    const std::vector<double> x = random_values<T>(n, ++seed, -s.x_range, s.x_range),
                              w = random_values<T>(s.C, ++seed, 0.5, 1.5);
    std::vector<T> aligned_y;
    std::vector<float> aligned_rstd;
    for (Offsets off : kOffsets) {
      if (off.scratch != 0) continue;   // the forward has no scratch
      Buffer<T> x_dev = buffer_at<T>(off.rows, x), w_dev = buffer_at<T>(off.w, w), y = poisoned_at<T>(off.rows, n);
      Buffer<float> rstd = poisoned_at<float>(0, s.R);
      kernels::rmsnorm_forward<T>(space, x_dev.data() + off.rows, w_dev.data() + off.w, y.data() + off.rows,
                                  rstd.data(), s.R, s.C, kEps);
      const std::string what = case_name("rmsnorm_forward", s, off);
      expect_untouched_outside(y.host(), off.rows, n, what + ": y");
      const std::vector<T> got_y = device_elements(y.data() + off.rows, n);
      const std::vector<float> got_rstd = device_elements(rstd.data(), s.R);
      std::vector<T> host_y(n);
      for (long i = 0; i < n; ++i)
        host_y[i] = T(static_cast<float>(x[i]) * got_rstd[i / s.C] * static_cast<float>(w[i % s.C]));
      expect_same_bits(got_y, host_y, what + ": y against x * rstd * w on the host");
      if (off.rows == 0 && off.w == 0) {
        aligned_y = got_y;
        aligned_rstd = got_rstd;
        if (!kDeviceIsGpu) {
          Buffer<T> y0(n);
          Buffer<float> rstd0(s.R);
          one_element::rmsnorm_forward<T>(space, x_dev.data(), w_dev.data(), y0.data(), rstd0.data(), s.R, s.C, kEps);
          expect_same_bits(rstd.data(), rstd0.data(), s.R, what + ": rstd against the kernel before packing");
          expect_same_bits(y.data(), y0.data(), n, what + ": y against the kernel before packing");
        }
      } else {
        expect_same_bits(got_rstd, aligned_rstd, what + ": rstd against the aligned run");
        expect_same_bits(got_y, aligned_y, what + ": y against the aligned run");
      }
    }
  }
}

// dx and dw at every alignment have the bits of the aligned run. dw has the bits of the kernel
// before packing on every device (each column still adds its rows, then its chunks, in order);
// dx on one thread (Serial) only, for the reason given for rstd above.
template <class T>
void check_backward_bits(float beta) {
  ExecSpace space;
  std::uint64_t seed = beta == 0 ? 130 : 150;
  for (const Shape& s : kShapes) {
    const long n = static_cast<long>(s.R) * s.C;
    const std::vector<double> x = random_values<T>(n, ++seed, -s.x_range, s.x_range),
                              w = random_values<T>(s.C, ++seed, 0.5, 1.5), dy = random_values<T>(n, ++seed),
                              dx_old = beta == 0 ? std::vector<double>(n, std::nan("")) : random_values<T>(n, ++seed),
                              dw_old = random_values<float>(s.C, ++seed);
    std::vector<double> rstd = ref_rstd(x, s.R, s.C, kEps);
    for (double& r : rstd) r = static_cast<float>(r);
    const Buffer<float> rstd_dev = buffer_at<float>(0, rstd);

    Buffer<T> want_dx = buffer_at<T>(0, dx_old);
    Buffer<float> want_dw = buffer_at<float>(0, dw_old);
    {
      Buffer<T> x0 = buffer_at<T>(0, x), w0 = buffer_at<T>(0, w), dy0 = buffer_at<T>(0, dy);
      Buffer<float> scratch(kernels::kRmsnormDwScratch);
      one_element::rmsnorm_backward<T>(space, x0.data(), w0.data(), rstd_dev.data(), dy0.data(), want_dx.data(),
                                       want_dw.data(), s.R, s.C, beta, scratch.data());
    }
    std::vector<T> aligned_dx;
    std::vector<float> aligned_dw;
    for (Offsets off : kOffsets) {
      Buffer<T> x_dev = buffer_at<T>(off.rows, x), w_dev = buffer_at<T>(off.w, w), dy_dev = buffer_at<T>(off.rows, dy);
      Buffer<T> dx = buffer_at<T>(off.rows, dx_old);
      Buffer<float> dw = buffer_at<float>(0, dw_old);
      Buffer<float> scratch(kernels::kRmsnormDwScratch + off.scratch);
      scratch.poison();   // the kernel must write every partial sum it reads
      kernels::rmsnorm_backward<T>(space, x_dev.data() + off.rows, w_dev.data() + off.w, rstd_dev.data(),
                                   dy_dev.data() + off.rows, dx.data() + off.rows, dw.data(), s.R, s.C, beta,
                                   scratch.data() + off.scratch);
      const std::string what = case_name(beta == 0 ? "rmsnorm_backward (beta 0)" : "rmsnorm_backward (beta 1)", s, off);
      expect_untouched_outside(dx.host(), off.rows, n, what + ": dx");
      expect_untouched_outside(dw.host(), 0, s.C, what + ": dw");
      const std::vector<T> got_dx = device_elements(dx.data() + off.rows, n);
      const std::vector<float> got_dw = device_elements(dw.data(), s.C);
      expect_same_bits(got_dw, device_elements(want_dw.data(), s.C), what + ": dw against the kernel before packing");
      if (off.rows == 0 && off.w == 0 && off.scratch == 0) {
        aligned_dx = got_dx;
        aligned_dw = got_dw;
        if (!kDeviceIsGpu)
          expect_same_bits(got_dx, device_elements(want_dx.data(), n), what + ": dx against the kernel before packing");
      } else {
        expect_same_bits(got_dx, aligned_dx, what + ": dx against the aligned run");
        expect_same_bits(got_dw, aligned_dw, what + ": dw against the aligned run");
      }
    }
  }
}

TYPED_TEST(RmsnormKernel, BackwardBitsDoNotDependOnPackingWhenBetaIsZero) { check_backward_bits<TypeParam>(0.0f); }
TYPED_TEST(RmsnormKernel, BackwardBitsDoNotDependOnPackingWhenBetaIsOne) { check_backward_bits<TypeParam>(1.0f); }

}  // namespace
}  // namespace shardrl
