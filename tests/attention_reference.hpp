// The fp64 host reference of causal GQA attention for the attention tests: shapes and sizes,
// right-padded and packed positions, and the explicit len x len softmax per sequence, forward
// and backward (tests/test_kernel_attention.cpp checks the backward against finite differences).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"

namespace shardrl::test {

using kernels::AttentionShape;

inline long tokens_of(const AttentionShape& s) { return static_cast<long>(s.B) * s.S; }
inline long q_size(const AttentionShape& s) { return tokens_of(s) * s.n_heads * s.hd; }
inline long kv_size(const AttentionShape& s) { return tokens_of(s) * s.n_kv_heads * s.hd; }
inline long lse_size(const AttentionShape& s) { return tokens_of(s) * s.n_heads; }

inline std::string describe(const AttentionShape& s) {
  return "B=" + std::to_string(s.B) + " S=" + std::to_string(s.S) + " heads=" + std::to_string(s.n_heads) +
         "/" + std::to_string(s.n_kv_heads) + " hd=" + std::to_string(s.hd);
}

struct Inputs {
  std::vector<double> q, k, v, dout;
  std::vector<std::int32_t> pos;  // (B*S): position of each token inside its sequence
};

// One sequence per row: positions n % S.
inline std::vector<std::int32_t> right_padded_positions(const AttentionShape& s) {
  std::vector<std::int32_t> pos(tokens_of(s));
  for (long n = 0; n < tokens_of(s); ++n) pos[n] = static_cast<std::int32_t>(n % s.S);
  return pos;
}

// Sequence lengths of each row (each row's lengths sum to S).
using RowLengths = std::vector<std::vector<int>>;

inline std::vector<std::int32_t> packed_positions(const AttentionShape& s, const RowLengths& rows) {
  EXPECT_EQ(static_cast<int>(rows.size()), s.B);
  std::vector<std::int32_t> pos;
  for (const std::vector<int>& row : rows) {
    int total = 0;
    for (int len : row) {
      for (int p = 0; p < len; ++p) pos.push_back(p);
      total += len;
    }
    EXPECT_EQ(total, s.S) << "row lengths must fill the row";
  }
  return pos;
}

// Row b % 3 == 0: one sequence filling the row; 1: two length-1 sequences, then random lengths
// in [1, S/3 + 1]; 2: random lengths in [1, S]. The last sequence of a row is cut to fit.
inline RowLengths random_row_lengths(const AttentionShape& s, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  RowLengths rows(s.B);
  for (int b = 0; b < s.B; ++b) {
    std::vector<int>& row = rows[b];
    int left = s.S;
    auto add = [&](int len) {
      len = std::min(len, left);
      row.push_back(len);
      left -= len;
    };
    if (b % 3 == 0) add(s.S);
    if (b % 3 == 1) {
      add(1);
      if (left > 0) add(1);
    }
    const int max_len = b % 3 == 1 ? s.S / 3 + 1 : s.S;
    while (left > 0) add(std::uniform_int_distribution<int>(1, max_len)(gen));
  }
  return rows;
}

inline std::string describe(const RowLengths& rows) {
  std::string out;
  for (const std::vector<int>& row : rows) {
    out += out.empty() ? "[" : " [";
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + std::to_string(row[i]);
    out += "]";
  }
  return out;
}

struct Forward {
  std::vector<double> out, lse;
};

struct Grads {
  std::vector<double> dq, dk, dv;
};

// A sequence: tokens [first, first + len).
struct Segment {
  long first;
  int len;
};

// The sequences of a layout, found from the positions alone: a sequence starts at every token
// whose position is 0 (and must at every row start); any other token continues the previous
// token's sequence, with position one higher, in the same row.
inline std::vector<Segment> reference_segments(const AttentionShape& s, const std::vector<std::int32_t>& pos) {
  EXPECT_EQ(static_cast<long>(pos.size()), tokens_of(s)) << "positions size";
  std::vector<Segment> segs;
  for (long n = 0; n < tokens_of(s); ++n) {
    if (pos[n] == 0) {
      segs.push_back(Segment{n, 1});
      continue;
    }
    EXPECT_TRUE(n % s.S != 0 && pos[n] == pos[n - 1] + 1) << "bad positions layout at token " << n;
    ++segs.back().len;
  }
  return segs;
}

// Explicit causal softmax P (len x len) of sequence seg, head h: P[i * len + j], zero for j > i.
inline std::vector<double> reference_probs(const AttentionShape& s, const Inputs& x, const Segment& seg, int h,
                                    std::vector<double>* lse_rows) {
  const int g = h / (s.n_heads / s.n_kv_heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  const int L = seg.len;
  std::vector<double> P(static_cast<std::size_t>(L) * L, 0.0);
  for (int i = 0; i < L; ++i) {
    const long qi = ((seg.first + i) * s.n_heads + h) * s.hd;
    std::vector<double> score(i + 1);
    for (int j = 0; j <= i; ++j) {
      const long kj = ((seg.first + j) * s.n_kv_heads + g) * s.hd;
      double dot = 0;
      for (int d = 0; d < s.hd; ++d) dot += x.q[qi + d] * x.k[kj + d];
      score[j] = scale * dot;
    }
    const double m = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (int j = 0; j <= i; ++j) sum += std::exp(score[j] - m);
    for (int j = 0; j <= i; ++j) P[i * L + j] = std::exp(score[j] - m) / sum;
    if (lse_rows) (*lse_rows)[i] = m + std::log(sum);
  }
  return P;
}

inline Forward reference_forward(const AttentionShape& s, const Inputs& x) {
  Forward f{std::vector<double>(q_size(s)), std::vector<double>(lse_size(s))};
  const int group = s.n_heads / s.n_kv_heads;
  for (const Segment& seg : reference_segments(s, x.pos))
    for (int h = 0; h < s.n_heads; ++h) {
      std::vector<double> lse_rows(seg.len);
      const std::vector<double> P = reference_probs(s, x, seg, h, &lse_rows);
      for (int i = 0; i < seg.len; ++i) {
        const long n = seg.first + i;
        f.lse[n * s.n_heads + h] = lse_rows[i];
        for (int d = 0; d < s.hd; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j)
            acc += P[i * seg.len + j] * x.v[((seg.first + j) * s.n_kv_heads + h / group) * s.hd + d];
          f.out[(n * s.n_heads + h) * s.hd + d] = acc;
        }
      }
    }
  return f;
}

// Gradients of L = sum dout * out through the explicit softmax Jacobian:
// dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik). Computed from P alone (not from the output).
inline Grads reference_backward(const AttentionShape& s, const Inputs& x) {
  Grads gr{std::vector<double>(q_size(s), 0.0), std::vector<double>(kv_size(s), 0.0),
           std::vector<double>(kv_size(s), 0.0)};
  const int group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  for (const Segment& seg : reference_segments(s, x.pos))
    for (int h = 0; h < s.n_heads; ++h) {
      const int g = h / group;
      const int L = seg.len;
      const std::vector<double> P = reference_probs(s, x, seg, h, nullptr);
      auto qrow = [&](int i) { return ((seg.first + i) * s.n_heads + h) * s.hd; };
      auto kvrow = [&](int j) { return ((seg.first + j) * s.n_kv_heads + g) * s.hd; };
      for (int i = 0; i < L; ++i) {
        std::vector<double> dP(i + 1);
        double sum_p_dp = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < s.hd; ++d) dot += x.dout[qrow(i) + d] * x.v[kvrow(j) + d];
          dP[j] = dot;
          sum_p_dp += P[i * L + j] * dot;
        }
        for (int j = 0; j <= i; ++j) {
          const double p = P[i * L + j];
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

// ---- Tolerances and comparisons shared by the attention tests ----

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::fabs(e));
  return m;
}

// Elements [begin, end) of a and b must be bit-identical (both were produced by the kernel).
inline void expect_identical(const std::vector<double>& a, const std::vector<double>& b, long begin, long end,
                      const std::string& what) {
  for (long e = begin; e < end; ++e)
    if (!(a[e] == b[e])) {
      ADD_FAILURE() << what << ": element " << e << " changed from " << a[e] << " to " << b[e];
      return;
    }
}

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
// Where a gradient cancels (dS_ij = P_ij (dP_ij - D_i) with dP_ij ~ D_i, e.g. a length-1
// sequence, whose exact dq and dk are 0), its rounding error scales with the terms, not with
// the result: |dP|, |D| <= hd max|dout| max|v|, times max|k| (dq) or max|q| summed over a
// group (dk), times the softmax scale. The fused kernels happen to compute dP_ij and D_i in the
// same order there; BLAS does not.
inline double dq_scale(const AttentionShape& s, const Inputs& x, const std::vector<double>& ref) {
  const double terms = s.hd * max_abs(x.dout) * max_abs(x.v) * max_abs(x.k) / std::sqrt(double(s.hd));
  return std::max(max_abs(ref), terms);
}
inline double dk_scale(const AttentionShape& s, const Inputs& x, const std::vector<double>& ref) {
  const double terms = s.hd * max_abs(x.dout) * max_abs(x.v) * max_abs(x.q) / std::sqrt(double(s.hd)) *
                       (s.n_heads / s.n_kv_heads);
  return std::max(max_abs(ref), terms);
}
// lse is an fp32 output computed from exact inputs: fp32 roundoff whatever T is.
constexpr double lse_tol() { return 32 * unit_roundoff<float>(); }

}  // namespace shardrl::test
