// Fused causal GQA attention (forward and backward) against a naive fp64 host reference that
// builds the explicit S x S causal softmax per sequence; the reference's own backward is checked
// against finite differences, so the kernel is not merely compared with its own formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"

namespace shardrl::test {
namespace {

using kernels::AttentionShape;

long tokens_of(const AttentionShape& s) { return static_cast<long>(s.B) * s.S; }
long q_size(const AttentionShape& s) { return tokens_of(s) * s.n_heads * s.hd; }
long kv_size(const AttentionShape& s) { return tokens_of(s) * s.n_kv_heads * s.hd; }
long lse_size(const AttentionShape& s) { return tokens_of(s) * s.n_heads; }

std::string describe(const AttentionShape& s) {
  return "B=" + std::to_string(s.B) + " S=" + std::to_string(s.S) + " heads=" + std::to_string(s.n_heads) +
         "/" + std::to_string(s.n_kv_heads) + " hd=" + std::to_string(s.hd);
}

struct Inputs {
  std::vector<double> q, k, v, dout;
};

struct Forward {
  std::vector<double> out, lse;
};

struct Grads {
  std::vector<double> dq, dk, dv;
};

// Explicit causal softmax P (S x S) of sequence b, head h: P[i * S + j], zero for j > i.
std::vector<double> reference_probs(const AttentionShape& s, const Inputs& x, int b, int h,
                                    std::vector<double>* lse_rows) {
  const int g = h / (s.n_heads / s.n_kv_heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  std::vector<double> P(static_cast<std::size_t>(s.S) * s.S, 0.0);
  for (int i = 0; i < s.S; ++i) {
    const long qi = ((static_cast<long>(b) * s.S + i) * s.n_heads + h) * s.hd;
    std::vector<double> score(i + 1);
    for (int j = 0; j <= i; ++j) {
      const long kj = ((static_cast<long>(b) * s.S + j) * s.n_kv_heads + g) * s.hd;
      double dot = 0;
      for (int d = 0; d < s.hd; ++d) dot += x.q[qi + d] * x.k[kj + d];
      score[j] = scale * dot;
    }
    const double m = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (int j = 0; j <= i; ++j) sum += std::exp(score[j] - m);
    for (int j = 0; j <= i; ++j) P[i * s.S + j] = std::exp(score[j] - m) / sum;
    if (lse_rows) (*lse_rows)[i] = m + std::log(sum);
  }
  return P;
}

Forward reference_forward(const AttentionShape& s, const Inputs& x) {
  Forward f{std::vector<double>(q_size(s)), std::vector<double>(lse_size(s))};
  const int group = s.n_heads / s.n_kv_heads;
  std::vector<double> lse_rows(s.S);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.n_heads; ++h) {
      const std::vector<double> P = reference_probs(s, x, b, h, &lse_rows);
      for (int i = 0; i < s.S; ++i) {
        const long n = static_cast<long>(b) * s.S + i;
        f.lse[n * s.n_heads + h] = lse_rows[i];
        for (int d = 0; d < s.hd; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j)
            acc += P[i * s.S + j] * x.v[((static_cast<long>(b) * s.S + j) * s.n_kv_heads + h / group) * s.hd + d];
          f.out[(n * s.n_heads + h) * s.hd + d] = acc;
        }
      }
    }
  return f;
}

// Gradients of L = sum dout * out through the explicit softmax Jacobian:
// dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik). Computed from P alone (not from the output).
Grads reference_backward(const AttentionShape& s, const Inputs& x) {
  Grads gr{std::vector<double>(q_size(s), 0.0), std::vector<double>(kv_size(s), 0.0),
           std::vector<double>(kv_size(s), 0.0)};
  const int group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.n_heads; ++h) {
      const int g = h / group;
      const std::vector<double> P = reference_probs(s, x, b, h, nullptr);
      auto qrow = [&](int i) { return ((static_cast<long>(b) * s.S + i) * s.n_heads + h) * s.hd; };
      auto kvrow = [&](int j) { return ((static_cast<long>(b) * s.S + j) * s.n_kv_heads + g) * s.hd; };
      for (int i = 0; i < s.S; ++i) {
        std::vector<double> dP(i + 1);
        double sum_p_dp = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < s.hd; ++d) dot += x.dout[qrow(i) + d] * x.v[kvrow(j) + d];
          dP[j] = dot;
          sum_p_dp += P[i * s.S + j] * dot;
        }
        for (int j = 0; j <= i; ++j) {
          const double p = P[i * s.S + j];
          const double dS = p * (dP[j] - sum_p_dp);
          for (int d = 0; d < s.hd; ++d) {
            gr.dq[qrow(i) + d] += scale * dS * x.k[kvrow(j) + d];
            gr.dk[kvrow(j) + d] += scale * dS * x.q[qrow(i) + d];
            gr.dv[kvrow(j) + d] += p * x.dout[qrow(i) + d];
          }
        }
      }
    }
  return gr;
}

double linear_loss(const AttentionShape& s, const Inputs& x) {
  const Forward f = reference_forward(s, x);
  double L = 0;
  for (std::size_t e = 0; e < f.out.size(); ++e) L += x.dout[e] * f.out[e];
  return L;
}

// The fp64 reference backward is the gradient of the fp64 reference forward.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 3, 4, 2, 3};
  Inputs x{random_values<double>(q_size(s), 11, -1.5, 1.5), random_values<double>(kv_size(s), 12, -1.5, 1.5),
           random_values<double>(kv_size(s), 13), random_values<double>(q_size(s), 14)};
  const Grads g = reference_backward(s, x);
  const double eps = 1e-5;
  auto fd = [&](std::vector<double>& param, long e) {
    const double saved = param[e];
    param[e] = saved + eps;
    const double up = linear_loss(s, x);
    param[e] = saved - eps;
    const double down = linear_loss(s, x);
    param[e] = saved;
    return (up - down) / (2 * eps);
  };
  // Central differences err by O(eps^2) ~ 1e-10 plus cancellation ~ 1e-16 / eps.
  const double tol = 1e-8;
  for (long e = 0; e < q_size(s); ++e) EXPECT_NEAR(g.dq[e], fd(x.q, e), tol) << "dq " << e;
  for (long e = 0; e < kv_size(s); ++e) {
    EXPECT_NEAR(g.dk[e], fd(x.k, e), tol) << "dk " << e;
    EXPECT_NEAR(g.dv[e], fd(x.v, e), tol) << "dv " << e;
  }
}

// Device buffers for one problem, outputs poisoned.
template <class T>
struct Problem {
  AttentionShape s;
  Inputs x;
  Buffer<T> q, k, v, dout, out, dq, dk, dv;
  Buffer<float> lse;

  Problem(const AttentionShape& shape, std::uint64_t seed)
      : s(shape),
        q(random_buffer<T>(q_size(s), seed + 1, &x.q, -2.0, 2.0)),
        k(random_buffer<T>(kv_size(s), seed + 2, &x.k, -2.0, 2.0)),
        v(random_buffer<T>(kv_size(s), seed + 3, &x.v)),
        dout(random_buffer<T>(q_size(s), seed + 4, &x.dout)),
        out(q_size(s)),
        dq(q_size(s)),
        dk(kv_size(s)),
        dv(kv_size(s)),
        lse(lse_size(s)) {}

  void forward() {
    out.poison();
    lse.poison();
    kernels::attention_forward<T>(ExecSpace(), s, q.data(), k.data(), v.data(), out.data(), lse.data());
  }
  void backward() {
    dq.poison();
    dk.poison();
    dv.poison();
    kernels::attention_backward<T>(ExecSpace(), s, q.data(), k.data(), v.data(), out.data(), lse.data(),
                                   dout.data(), dq.data(), dk.data(), dv.data());
  }
  // Replaces the inputs with x (already representable in T).
  void upload() {
    q.set(x.q);
    k.set(x.k);
    v.set(x.v);
    dout.set(x.dout);
  }
};

std::vector<AttentionShape> all_shapes() {
  std::vector<AttentionShape> shapes;
  const int heads[4][2] = {{1, 1}, {4, 2}, {6, 3}, {4, 4}};
  for (int B : {1, 2, 3})
    for (int S : {1, 5, 17, 33})
      for (const auto& hh : heads)
        for (int hd : {8, 16, 64}) shapes.push_back(AttentionShape{B, S, hh[0], hh[1], hd});
  return shapes;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::fabs(e));
  return m;
}

// Elements [begin, end) of a and b must be bit-identical (both were produced by the kernel).
void expect_identical(const std::vector<double>& a, const std::vector<double>& b, long begin, long end,
                      const std::string& what) {
  for (long e = begin; e < end; ++e)
    if (!(a[e] == b[e])) {
      ADD_FAILURE() << what << ": element " << e << " changed from " << a[e] << " to " << b[e];
      return;
    }
}

// Some element in [begin, end) differs: proves the perturbation reached the kernel, so the
// "unchanged" checks beside it can fail.
void expect_some_change(const std::vector<double>& a, const std::vector<double>& b, long begin, long end,
                        const std::string& what) {
  for (long e = begin; e < end; ++e)
    if (a[e] != b[e]) return;
  ADD_FAILURE() << what << ": nothing in [" << begin << ", " << end << ") changed";
}

template <class T>
class AttentionKernel : public ::testing::Test {};
using ActivationTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(AttentionKernel, ActivationTypes);

// Tolerances (u = unit roundoff of T). The kernel computes in fp32 from inputs that the
// reference sees exactly, so for bf16 the error is dominated by rounding the result to T
// (<= 1 u relative), and for float by fp32 dot products of length hd <= 64 and sums over <= 33
// keys (a few tens of u). Gradients involve cancellation (dS sums to zero over j), so their
// absolute tolerance is relative to the tensor's largest element; bf16 gradients also inherit
// the bf16 rounding of `out` through D_i = dout . out.
template <class T>
constexpr double out_rtol() { return std::is_same_v<T, bf16> ? 1.5 * unit_roundoff<T>() : 32 * unit_roundoff<T>(); }
template <class T>
constexpr double grad_atol_rel() { return std::is_same_v<T, bf16> ? 4 * unit_roundoff<T>() : 64 * unit_roundoff<T>(); }
template <class T>
constexpr double grad_rtol() { return std::is_same_v<T, bf16> ? 2 * unit_roundoff<T>() : 32 * unit_roundoff<T>(); }
// lse is an fp32 output computed from exact inputs: fp32 roundoff whatever T is.
constexpr double lse_tol() { return 32 * unit_roundoff<float>(); }

TYPED_TEST(AttentionKernel, ForwardMatchesReference) {
  using T = TypeParam;
  std::uint64_t seed = 100;
  for (const AttentionShape& s : all_shapes()) {
    SCOPED_TRACE(describe(s));
    Problem<T> p(s, seed += 10);
    p.forward();
    const Forward ref = reference_forward(s, p.x);
    expect_close(p.out.host(), ref.out, out_rtol<T>(), out_rtol<T>() * max_abs(ref.out), "out");
    expect_close(p.lse.host(), ref.lse, lse_tol(), lse_tol(), "lse");
  }
}

TYPED_TEST(AttentionKernel, BackwardMatchesReference) {
  using T = TypeParam;
  std::uint64_t seed = 5000;
  for (const AttentionShape& s : all_shapes()) {
    SCOPED_TRACE(describe(s));
    Problem<T> p(s, seed += 10);
    p.forward();
    p.backward();
    const Grads ref = reference_backward(s, p.x);
    expect_close(p.dq.host(), ref.dq, grad_rtol<T>(), grad_atol_rel<T>() * max_abs(ref.dq), "dq");
    expect_close(p.dk.host(), ref.dk, grad_rtol<T>(), grad_atol_rel<T>() * max_abs(ref.dk), "dk");
    expect_close(p.dv.host(), ref.dv, grad_rtol<T>(), grad_atol_rel<T>() * max_abs(ref.dv), "dv");
  }
}

// Keys that are all zero give uniform weights: out_i is the mean of v_0..v_i and lse_i is
// log(i + 1), a result that does not depend on any reference implementation.
TYPED_TEST(AttentionKernel, ZeroKeysAverageValues) {
  using T = TypeParam;
  const AttentionShape s{2, 17, 4, 2, 16};
  Problem<T> p(s, 7);
  p.x.k.assign(kv_size(s), 0.0);
  p.upload();
  p.forward();
  const std::vector<double> out = p.out.host(), lse = p.lse.host();
  std::vector<double> want_out(out.size()), want_lse(lse.size());
  for (long n = 0; n < tokens_of(s); ++n) {
    const long first = n - n % s.S;
    for (int h = 0; h < s.n_heads; ++h) {
      want_lse[n * s.n_heads + h] = std::log(static_cast<double>(n - first + 1));
      for (int d = 0; d < s.hd; ++d) {
        double sum = 0;
        for (long j = first; j <= n; ++j) sum += p.x.v[(j * s.n_kv_heads + h / 2) * s.hd + d];
        want_out[(n * s.n_heads + h) * s.hd + d] = sum / static_cast<double>(n - first + 1);
      }
    }
  }
  expect_close(out, want_out, out_rtol<T>(), out_rtol<T>(), "out");
  expect_close(lse, want_lse, lse_tol(), lse_tol(), "lse");
}

// Changing key/value at position t of every sequence leaves every earlier position of the
// forward bit-identical; changing query and dout at t leaves the backward of other queries and
// of later keys bit-identical.
TYPED_TEST(AttentionKernel, Causal) {
  using T = TypeParam;
  const AttentionShape s{2, 17, 6, 3, 16};
  const int t = 9;
  const long q_row = static_cast<long>(s.n_heads) * s.hd, kv_row = static_cast<long>(s.n_kv_heads) * s.hd;
  Problem<T> p(s, 21);
  p.forward();
  p.backward();
  const std::vector<double> out0 = p.out.host(), lse0 = p.lse.host();
  const std::vector<double> dq0 = p.dq.host(), dk0 = p.dk.host(), dv0 = p.dv.host();

  const Inputs original = p.x;
  const std::vector<double> fresh = random_values<T>(kv_row, 99);
  for (int b = 0; b < s.B; ++b)
    for (long e = 0; e < kv_row; ++e) {
      const long at = (static_cast<long>(b) * s.S + t) * kv_row + e;
      p.x.k[at] = fresh[e];
      p.x.v[at] = -fresh[e];
    }
  p.upload();
  p.forward();
  const std::vector<double> out1 = p.out.host(), lse1 = p.lse.host();
  for (int b = 0; b < s.B; ++b) {
    const long first = static_cast<long>(b) * s.S;
    expect_identical(out0, out1, first * q_row, (first + t) * q_row, "out before t");
    expect_identical(lse0, lse1, first * s.n_heads, (first + t) * s.n_heads, "lse before t");
    expect_some_change(out0, out1, (first + t) * q_row, (first + s.S) * q_row, "out from t on");
  }

  p.x = original;
  const std::vector<double> fresh_q = random_values<T>(q_row, 98);
  for (int b = 0; b < s.B; ++b)
    for (long e = 0; e < q_row; ++e) {
      const long at = (static_cast<long>(b) * s.S + t) * q_row + e;
      p.x.q[at] = fresh_q[e];
      p.x.dout[at] = -fresh_q[e];
    }
  p.upload();
  p.forward();
  p.backward();
  const std::vector<double> dq1 = p.dq.host(), dk1 = p.dk.host(), dv1 = p.dv.host();
  for (int b = 0; b < s.B; ++b) {
    const long first = static_cast<long>(b) * s.S;
    expect_identical(dq0, dq1, first * q_row, (first + t) * q_row, "dq before t");
    expect_identical(dq0, dq1, (first + t + 1) * q_row, (first + s.S) * q_row, "dq after t");
    expect_identical(dk0, dk1, (first + t + 1) * kv_row, (first + s.S) * kv_row, "dk after t");
    expect_identical(dv0, dv1, (first + t + 1) * kv_row, (first + s.S) * kv_row, "dv after t");
    expect_some_change(dk0, dk1, first * kv_row, (first + t + 1) * kv_row, "dk up to t");
    expect_some_change(dv0, dv1, first * kv_row, (first + t + 1) * kv_row, "dv up to t");
  }
}

// Changing every input of sequence 1 leaves sequences 0 and 2 bit-identical, forward and backward.
TYPED_TEST(AttentionKernel, SequencesIndependent) {
  using T = TypeParam;
  const AttentionShape s{3, 5, 4, 2, 8};
  const long q_seq = static_cast<long>(s.S) * s.n_heads * s.hd, kv_seq = static_cast<long>(s.S) * s.n_kv_heads * s.hd;
  const long lse_seq = static_cast<long>(s.S) * s.n_heads;
  Problem<T> p(s, 31);
  p.forward();
  p.backward();
  const std::vector<double> before[5] = {p.out.host(), p.lse.host(), p.dq.host(), p.dk.host(), p.dv.host()};

  const std::vector<double> fresh_q = random_values<T>(2 * q_seq, 77), fresh_kv = random_values<T>(2 * kv_seq, 78);
  for (long e = 0; e < q_seq; ++e) {
    p.x.q[q_seq + e] = fresh_q[e];
    p.x.dout[q_seq + e] = fresh_q[q_seq + e];
  }
  for (long e = 0; e < kv_seq; ++e) {
    p.x.k[kv_seq + e] = fresh_kv[e];
    p.x.v[kv_seq + e] = fresh_kv[kv_seq + e];
  }
  p.upload();
  p.forward();
  p.backward();
  const std::vector<double> after[5] = {p.out.host(), p.lse.host(), p.dq.host(), p.dk.host(), p.dv.host()};
  const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
  const long per_seq[5] = {q_seq, lse_seq, q_seq, kv_seq, kv_seq};
  for (int t = 0; t < 5; ++t) {
    expect_identical(before[t], after[t], 0, per_seq[t], std::string(names[t]) + " of sequence 0");
    expect_identical(before[t], after[t], 2 * per_seq[t], 3 * per_seq[t], std::string(names[t]) + " of sequence 2");
    expect_some_change(before[t], after[t], per_seq[t], 2 * per_seq[t], std::string(names[t]) + " of sequence 1");
  }
}

// Two runs on the same inputs give bit-identical results (no atomics, fixed summation order).
TYPED_TEST(AttentionKernel, Deterministic) {
  using T = TypeParam;
  const AttentionShape s{2, 33, 6, 3, 64};
  Problem<T> p(s, 41);
  p.forward();
  p.backward();
  const std::vector<double> out0 = p.out.host(), lse0 = p.lse.host();
  const std::vector<double> dq0 = p.dq.host(), dk0 = p.dk.host(), dv0 = p.dv.host();
  p.forward();
  p.backward();
  expect_identical(out0, p.out.host(), 0, q_size(s), "out");
  expect_identical(lse0, p.lse.host(), 0, lse_size(s), "lse");
  expect_identical(dq0, p.dq.host(), 0, q_size(s), "dq");
  expect_identical(dk0, p.dk.host(), 0, kv_size(s), "dk");
  expect_identical(dv0, p.dv.host(), 0, kv_size(s), "dv");
}

}  // namespace
}  // namespace shardrl::test
