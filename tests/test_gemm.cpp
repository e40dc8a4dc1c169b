// Gemm against an fp64 host reference: every (opA, opB), the three type combinations, odd and
// degenerate shapes, padded leading dimensions, alpha in {1, -0.5}, beta in {0, 1}, strided
// batches, counters. C is NaN-poisoned when beta = 0 (proves C is not read), and every element
// outside the (m, n) window of a padded C or between batch entries is NaN and must stay NaN
// (proves nothing is written outside C).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "blas/gemm.hpp"
#include "kernel_test_util.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::random_values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* name(Op op) { return op == Op::N ? "N" : "T"; }

template <class T>
const char* type_name() {
  return std::is_same_v<T, bf16> ? "bf16" : "float";
}

// A row-major (rows, cols) matrix with row stride ld inside a buffer of `count` such matrices,
// `stride` elements apart. Elements outside the matrices (padding, gaps) are NaN.
template <class T>
struct Operand {
  int rows, cols, ld;
  long stride;
  std::vector<double> values;   // what the buffer holds, as double
  Buffer<T> buffer;

  Operand(int rows_, int cols_, int pad, int count, long gap, std::uint64_t seed, bool fill)
      : rows(rows_),
        cols(cols_),
        ld(std::max(1, cols_) + pad),
        stride(static_cast<long>(rows_) * ld + gap),
        values(static_cast<std::size_t>(std::max(1L, stride * count)), kNaN),
        buffer(static_cast<long>(values.size())) {
    if (fill) {
      std::vector<double> r = random_values<T>(static_cast<long>(values.size()), seed);
      for (int b = 0; b < count; ++b)
        for (long i = 0; i < rows; ++i)
          for (long j = 0; j < cols; ++j) at(b, i, j) = r[b * stride + i * ld + j];
    }
    buffer.set(values);
  }
  double& at(int b, long i, long j) { return values[b * stride + i * ld + j]; }
  double at(int b, long i, long j) const { return values[b * stride + i * ld + j]; }
  bool inside(long index) const {
    const long r = index % stride;
    return r < static_cast<long>(rows) * ld && r % ld < cols;
  }
};

struct Shape {
  int m, n, k;
};
const Shape kShapes[] = {{1, 1, 1}, {3, 5, 7}, {17, 1, 33}, {64, 48, 80}, {129, 65, 31},
                         {0, 4, 4}, {4, 0, 4}, {4, 4, 0}};

// Runs one (batched) product and compares every batch entry with the fp64 reference.
//
// Tolerance, per element (c, i, j). With u = 2^-24 (fp32 unit roundoff) and
//   s = |alpha| * sum_p |a_ip b_pj| + |beta c_ij|,
// an fp32 product accumulated in fp32 (any summation order, fused or not) satisfies the standard
// forward error bound |err| <= gamma_{k+2} s ~ (k+2) u s; we allow 4 (k+2) u s + tiny, the factor
// 4 covering tensor cores' truncating adds. bf16 inputs change nothing (their products are exact
// in fp32). A bf16 C adds one rounding of the result to bf16: + 2^-8 (|ref| + fp32 bound). With
// beta != 0 it may add a second: cuBLAS's bf16-output kernels for aligned shapes round alpha*AB
// to bf16 before adding beta*C (H100, cuBLAS 13.1, whatever the math mode), so there we also
// allow + 2^-8 (|alpha sum_p a_ip b_pj| + fp32 bound). The host backend rounds once.
template <class TA, class TB, class TC>
void check_product(Gemm& gemm, Op opA, Op opB, Shape s, float alpha, float beta, int pad, int batch,
                   std::uint64_t seed) {
  const int m = s.m, n = s.n, k = s.k;
  SCOPED_TRACE(std::string(type_name<TA>()) + "," + type_name<TB>() + "->" + type_name<TC>() + " op" +
               name(opA) + name(opB) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
               " k=" + std::to_string(k) + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
               " pad=" + std::to_string(pad) + " batch=" + std::to_string(batch));
  const long gap = batch > 1 ? 5 : 0;   // batch entries apart by more than one matrix
  Operand<TA> A(opA == Op::N ? m : k, opA == Op::N ? k : m, pad, batch, gap, seed, true);
  Operand<TB> B(opB == Op::N ? k : n, opB == Op::N ? n : k, pad, batch, gap, seed + 1, true);
  // beta = 0: C is all NaN and must not be read. beta = 1: random values to accumulate into.
  Operand<TC> C(m, n, pad, batch, gap, seed + 2, beta != 0.0f);

  if (batch == 1)
    gemm.gemm(opA, opB, m, n, k, alpha, A.buffer.data(), A.ld, B.buffer.data(), B.ld, beta, C.buffer.data(), C.ld);
  else
    gemm.gemm_strided_batched(opA, opB, m, n, k, alpha, A.buffer.data(), A.ld, A.stride, B.buffer.data(), B.ld,
                              B.stride, beta, C.buffer.data(), C.ld, C.stride, batch);
  const std::vector<double> got = C.buffer.host();

  const double u = test::unit_roundoff<float>();
  const double u_out = std::is_same_v<TC, bf16> ? test::unit_roundoff<bf16>() : 0.0;
  const double tiny = 1e-30;
  long failures = 0;
  for (int b = 0; b < batch; ++b) {
    for (long i = 0; i < m; ++i) {
      for (long j = 0; j < n; ++j) {
        double sum = 0, abs_sum = 0;
        for (long p = 0; p < k; ++p) {
          const double a = opA == Op::N ? A.at(b, i, p) : A.at(b, p, i);
          const double bb = opB == Op::N ? B.at(b, p, j) : B.at(b, j, p);
          sum += a * bb;
          abs_sum += std::fabs(a * bb);
        }
        const double c0 = beta != 0.0f ? C.at(b, i, j) : 0.0;
        const double want = alpha * sum + beta * c0;
        const double bound32 = 4.0 * (k + 2) * u * (std::fabs(alpha) * abs_sum + std::fabs(beta * c0)) + tiny;
        const double second = beta != 0.0f ? u_out * (std::fabs(alpha * sum) + bound32) : 0.0;
        const double bound = bound32 + u_out * (std::fabs(want) + bound32) + second;
        const double have = got[b * C.stride + i * C.ld + j];
        if (!(std::fabs(have - want) <= bound) && failures++ < 5)
          ADD_FAILURE() << "batch " << b << " C(" << i << "," << j << ") = " << have << ", reference " << want
                        << ", allowed error " << bound;
      }
    }
  }
  // Padding and gaps of C: still NaN.
  for (long index = 0; index < static_cast<long>(got.size()); ++index)
    if ((m == 0 || n == 0 || !C.inside(index)) && !std::isnan(got[index]) && failures++ < 5)
      ADD_FAILURE() << "element " << index << " outside C was written: " << got[index];
  EXPECT_EQ(failures, 0);
}

template <class TA, class TB, class TC>
void check_all_cases() {
  Gemm gemm{ExecSpace()};
  std::uint64_t seed = 1000;
  for (Op opA : {Op::N, Op::T})
    for (Op opB : {Op::N, Op::T})
      for (const Shape& s : kShapes)
        for (float alpha : {1.0f, -0.5f})
          for (float beta : {0.0f, 1.0f})
            for (int pad : {0, 3}) check_product<TA, TB, TC>(gemm, opA, opB, s, alpha, beta, pad, 1, seed += 3);
}

TEST(Gemm, FloatFloatToFloat) { check_all_cases<float, float, float>(); }
TEST(Gemm, Bf16Bf16ToBf16) { check_all_cases<bf16, bf16, bf16>(); }
TEST(Gemm, Bf16Bf16ToFloat) { check_all_cases<bf16, bf16, float>(); }

// Batch 3, distinct data per entry, entries apart by more than one matrix (gaps must stay NaN).
template <class TA, class TB, class TC>
void check_batched() {
  Gemm gemm{ExecSpace()};
  std::uint64_t seed = 5000;
  for (Op opA : {Op::N, Op::T})
    for (Op opB : {Op::N, Op::T})
      for (Shape s : {Shape{17, 9, 33}, Shape{1, 1, 1}, Shape{4, 4, 0}})
        for (float beta : {0.0f, 1.0f}) check_product<TA, TB, TC>(gemm, opA, opB, s, -0.5f, beta, 2, 3, seed += 3);
}

// A large product with unaligned leading dimensions: there cuBLAS splits k and, unless told not
// to (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION), reduces the partial sums in bf16, which
// breaks the bound above for some elements (measured on H100, cuBLAS 13.1).
TEST(Gemm, LargeUnalignedBf16Accumulate) {
  Gemm gemm{ExecSpace()};
  check_product<bf16, bf16, bf16>(gemm, Op::N, Op::N, Shape{1024, 1024, 1024}, 1.0f, 1.0f, 3, 1, 4242);
}

TEST(GemmStridedBatched, FloatFloatToFloat) { check_batched<float, float, float>(); }
TEST(GemmStridedBatched, Bf16Bf16ToBf16) { check_batched<bf16, bf16, bf16>(); }
TEST(GemmStridedBatched, Bf16Bf16ToFloat) { check_batched<bf16, bf16, float>(); }

// One call per API call (a batch is one call); flops = 2 m n k per product, times the batch.
TEST(Gemm, Counters) {
  Gemm gemm{ExecSpace()};
  EXPECT_EQ(gemm.counters().calls, 0);
  EXPECT_EQ(gemm.counters().flops, 0.0);
  Buffer<float> a(64), b(64), c(64);
  a.set(std::vector<double>(64, 1.0));
  b.set(std::vector<double>(64, 1.0));
  gemm.gemm(Op::N, Op::N, 3, 5, 7, 1.0f, a.data(), 7, b.data(), 5, 0.0f, c.data(), 5);
  EXPECT_EQ(gemm.counters().calls, 1);
  EXPECT_EQ(gemm.counters().flops, 2.0 * 3 * 5 * 7);
  gemm.gemm_strided_batched(Op::N, Op::T, 2, 3, 4, 1.0f, a.data(), 4, 8, b.data(), 4, 12, 0.0f, c.data(), 3, 6, 3);
  EXPECT_EQ(gemm.counters().calls, 2);
  EXPECT_EQ(gemm.counters().flops, 2.0 * 3 * 5 * 7 + 2.0 * 2 * 3 * 4 * 3);
  gemm.gemm(Op::N, Op::N, 0, 5, 7, 1.0f, a.data(), 7, b.data(), 5, 0.0f, c.data(), 5);   // no-op, still a call
  EXPECT_EQ(gemm.counters().calls, 3);
  EXPECT_EQ(gemm.counters().flops, 2.0 * 3 * 5 * 7 + 2.0 * 2 * 3 * 4 * 3);
}

// Grouped products (the MoE experts' GEMMs): each its own m, n, k and operands, the same ops and
// leading dimensions, an empty product skipped; every combination of types and ops against fp64,
// with beta = 1 accumulating into what C held.
// Returns how the call ran (GemmCounters::grouped_as_one, 1 or 0).
template <class TA, class TC>
std::int64_t check_grouped(Op opA, Op opB) {
  Gemm gemm{ExecSpace()};
  gemm.reserve_groups(4);
  const std::vector<int> m{5, 0, 9, 3}, n{7, 4, 2, 6}, k{4, 3, 8, 1};
  const int lda = 11, ldb = 12, ldc = 13;   // room for every product's operands in either op
  std::vector<Buffer<TA>> a, b;
  std::vector<Buffer<TC>> c;
  std::vector<std::vector<double>> av, bv, cv;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const int a_rows = opA == Op::N ? m[i] : k[i], b_rows = opB == Op::N ? k[i] : n[i];
    av.push_back(random_values<TA>(long(std::max(1, a_rows)) * lda, 100 + i));
    bv.push_back(random_values<TA>(long(std::max(1, b_rows)) * ldb, 200 + i));
    cv.push_back(random_values<TC>(long(std::max(1, m[i])) * ldc, 300 + i));
    a.emplace_back(long(av.back().size()));
    b.emplace_back(long(bv.back().size()));
    c.emplace_back(long(cv.back().size()));
    a.back().set(av.back());
    b.back().set(bv.back());
    c.back().set(cv.back());
  }
  std::vector<const TA*> ap, bp;
  std::vector<TC*> cp;
  for (std::size_t i = 0; i < m.size(); ++i) {
    ap.push_back(a[i].data());
    bp.push_back(b[i].data());
    cp.push_back(c[i].data());
  }
  gemm.gemm_grouped(opA, opB, m, n, k, 0.5f, ap, lda, bp, ldb, 1.0f, cp, ldc);
  for (std::size_t i = 0; i < m.size(); ++i) {
    const std::vector<double> got = c[i].host();
    for (int r = 0; r < m[i]; ++r)
      for (int j = 0; j < n[i]; ++j) {
        double want = cv[i][r * ldc + j], scale = std::fabs(want);
        for (int t = 0; t < k[i]; ++t) {
          const double x = opA == Op::N ? av[i][r * lda + t] : av[i][t * lda + r];
          const double y = opB == Op::N ? bv[i][t * ldb + j] : bv[i][j * ldb + t];
          want += 0.5 * x * y;
          scale += std::fabs(0.5 * x * y);
        }
        const double tol = (std::is_same_v<TC, bf16> ? 8e-3 : 1e-5) * scale + 1e-6;
        EXPECT_NEAR(got[r * ldc + j], want, tol) << "product " << i << " (" << r << ", " << j << ") " << name(opA)
                                                 << name(opB) << " " << type_name<TA>() << "->" << type_name<TC>();
      }
  }
  EXPECT_EQ(gemm.counters().grouped_as_one + gemm.counters().grouped_as_loop, 1);
  EXPECT_EQ(gemm.counters().calls, 3) << "the empty product is not one";
  return gemm.counters().grouped_as_one;
}

// On the GPU the fp32 products (the fp32 mode's experts) run as one grouped cuBLAS call; what
// cuBLAS does with the bf16 combinations is printed (a refused combination loops, still right).
TEST(Gemm, GroupedProductsMatchFp64) {
  std::int64_t one[3] = {0, 0, 0};
  for (Op opA : {Op::N, Op::T})
    for (Op opB : {Op::N, Op::T}) {
      one[0] += check_grouped<float, float>(opA, opB);
      one[1] += check_grouped<bf16, bf16>(opA, opB);
      one[2] += check_grouped<bf16, float>(opA, opB);
    }
  std::cout << "grouped as one call (of 4 op pairs): f32 " << one[0] << ", bf16->bf16 " << one[1] << ", bf16->f32 "
            << one[2] << "\n";
  EXPECT_EQ(one[0], kDeviceIsGpu ? 4 : 0);
  if (!kDeviceIsGpu) {
    EXPECT_EQ(one[1] + one[2], 0);
  }
}

// Host backend: reserve() sizes the fp32 workspace for the largest product, and products within
// it never grow it. The cuBLAS backend's workspace is fixed at construction (32 MiB).
TEST(Gemm, WorkspaceReserve) {
  Gemm gemm{ExecSpace()};
  const std::size_t fixed = kDeviceIsGpu ? std::size_t(32) << 20 : 0;
  EXPECT_EQ(gemm.workspace_bytes(), fixed);
  gemm.reserve(64, 48, 80);
  const std::size_t reserved = kDeviceIsGpu ? fixed : (64 * 80 + 80 * 48 + 64 * 48) * sizeof(float);
  EXPECT_EQ(gemm.workspace_bytes(), reserved);
  check_product<bf16, bf16, bf16>(gemm, Op::T, Op::N, Shape{64, 48, 80}, 1.0f, 1.0f, 0, 1, 77);
  check_product<bf16, bf16, bf16>(gemm, Op::N, Op::T, Shape{48, 64, 80}, 1.0f, 0.0f, 0, 3, 78);
  EXPECT_EQ(gemm.workspace_bytes(), reserved);
}

// A leading dimension too small for the op is a caller bug: fatal, naming the call.
TEST(GemmDeathTest, LeadingDimensionTooSmall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Buffer<float> a(64), b(64), c(64);
  EXPECT_DEATH(
      {
        Gemm gemm{ExecSpace()};
        gemm.gemm(Op::T, Op::N, 4, 4, 8, 1.0f, a.data(), 3, b.data(), 4, 0.0f, c.data(), 4);
      },
      "check failed: lda >= ");
}

// Batched outputs may sit below each other or side by side in the same rows (the heads of a
// (tokens, heads * hd) matrix); outputs that overlap are a caller bug: fatal.
TEST(GemmDeathTest, OverlappingBatchedOutputs) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Buffer<float> a(64), b(64), c(64);
  EXPECT_DEATH(
      {
        Gemm gemm{ExecSpace()};
        // m 3, n 4, ldc 6: product 1 starts 3 columns after product 0, inside its 4 columns.
        gemm.gemm_strided_batched(Op::N, Op::N, 3, 4, 2, 1.0f, a.data(), 2, 6, b.data(), 4, 8, 0.0f, c.data(), 6, 3,
                                  2);
      },
      "stacked \\|\\| side_by_side");
}

TEST(GemmStridedBatched, SideBySideOutputs) {
  // Two (3, 2) products into the columns 0-1 and 2-3 of a (3, 4) matrix, against a hand sum.
  Gemm gemm{ExecSpace()};
  Buffer<float> a(12), b(8), c(12);
  std::vector<double> av(12), bv(8);
  for (int i = 0; i < 12; ++i) av[i] = i % 5 - 2;
  for (int i = 0; i < 8; ++i) bv[i] = i % 3 - 1;
  a.set(av);   // product p: A_p (3, 2) at a + 6p, row stride 2
  b.set(bv);   // product p: B_p (2, 2) at b + 4p, row stride 2
  gemm.gemm_strided_batched(Op::N, Op::N, 3, 2, 2, 1.0f, a.data(), 2, 6, b.data(), 2, 4, 0.0f, c.data(), 4, 2, 2);
  std::vector<double> want(12, 0.0);
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j)
        for (int l = 0; l < 2; ++l) want[i * 4 + p * 2 + j] += av[6 * p + i * 2 + l] * bv[4 * p + l * 2 + j];
  test::expect_close(c.host(), want, 0.0, 0.0, "side-by-side products");
}

}  // namespace
}  // namespace shardrl
