// Causal GQA attention (forward and backward), both implementations: the fused kernels
// (kernels/attention.hpp) and the model's batched-GEMM attention (model/gemm_attention.hpp), against
// a naive fp64 host reference that builds the explicit len x len causal softmax per sequence;
// the reference's own backward is checked against finite differences, so neither is merely
// compared with its own formula.
// Sequences are either right-padded (one per row, positions n % S) or packed (several per row);
// the reference finds them by scanning the positions for the zeros that start a sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/attention.hpp"
#include "model/gemm_attention.hpp"

namespace shardrl::test {
namespace {

double linear_loss(const AttentionShape& s, const Inputs& x) {
  const Forward f = reference_forward(s, x);
  double L = 0;
  for (std::size_t e = 0; e < f.out.size(); ++e) L += x.dout[e] * f.out[e];
  return L;
}

// The fp64 reference backward is the gradient of the fp64 reference forward.
void check_reference_against_finite_differences(const AttentionShape& s, const std::vector<std::int32_t>& pos) {
  Inputs x{random_values<double>(q_size(s), 11, -1.5, 1.5), random_values<double>(kv_size(s), 12, -1.5, 1.5),
           random_values<double>(kv_size(s), 13), random_values<double>(q_size(s), 14), pos};
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

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 3, 4, 2, 3};
  check_reference_against_finite_differences(s, right_padded_positions(s));
}

// Packed rows: lengths 1, 3, 2 (a length-1 sequence first) and one sequence filling the row.
TEST(AttentionReference, BackwardMatchesFiniteDifferencesPacked) {
  const AttentionShape s{2, 6, 4, 2, 3};
  const RowLengths rows{{1, 3, 2}, {6}};
  ASSERT_EQ(reference_segments(s, packed_positions(s, rows)).size(), 4u);
  check_reference_against_finite_differences(s, packed_positions(s, rows));
}

// Device buffers for one problem, outputs poisoned.
// The two implementations under test.
struct Fused {};
struct Gemms {};
template <class I, class T>
struct Case {
  using Impl = I;
  using Type = T;
};

template <class T, class Impl = Fused>
struct Problem {
  AttentionShape s;
  Inputs x;
  Buffer<T> q, k, v, dout, out, dq, dk, dv;
  Buffer<float> lse;
  DeviceView<std::int32_t> pos;
  // The GEMM implementation's products and scratch (poisoned before each call).
  Gemm gemm{ExecSpace()};
  AttentionWorkspaceSizes ws_bytes;
  Buffer<char> ws_probs{1};
  Buffer<float> ws_scores{1}, ws_dk{1}, ws_dv{1};

  // Positions default to right padding (n % S).
  Problem(const AttentionShape& shape, std::uint64_t seed, std::vector<std::int32_t> positions = {})
      : s(shape),
        q(random_buffer<T>(q_size(s), seed + 1, &x.q, -2.0, 2.0)),
        k(random_buffer<T>(kv_size(s), seed + 2, &x.k, -2.0, 2.0)),
        v(random_buffer<T>(kv_size(s), seed + 3, &x.v)),
        dout(random_buffer<T>(q_size(s), seed + 4, &x.dout)),
        out(q_size(s)),
        dq(q_size(s)),
        dk(kv_size(s)),
        dv(kv_size(s)),
        lse(lse_size(s)),
        pos("positions", static_cast<std::size_t>(tokens_of(s))) {
    x.pos = positions.empty() ? right_padded_positions(s) : std::move(positions);
    upload_positions();
    if constexpr (std::is_same_v<Impl, Gemms>) {
      ws_bytes = attention_workspace_bytes(s, sizeof(T), true);
      ws_scores = Buffer<float>(static_cast<long>(ws_bytes.scores / sizeof(float)));
      ws_probs = Buffer<char>(static_cast<long>(ws_bytes.probs));
      ws_dk = Buffer<float>(static_cast<long>(ws_bytes.dkv / sizeof(float)));
      ws_dv = Buffer<float>(static_cast<long>(ws_bytes.dkv / sizeof(float)));
      reserve_attention_gemms(gemm, s);
    }
  }
  AttentionWorkspace workspace() {
    ws_scores.poison();
    Kokkos::deep_copy(ws_probs.device, char(0xFF));   // NaN in bf16 and fp32
    ws_dk.poison();
    ws_dv.poison();
    return {ws_scores.data(), ws_probs.data(), ws_dk.data(), ws_dv.data()};
  }

  void forward() {
    out.poison();
    lse.poison();
    if constexpr (std::is_same_v<Impl, Gemms>)
      shardrl::gemm_attention_forward<T>(ExecSpace(), gemm, s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                    lse.data(), workspace());
    else
      kernels::attention_forward<T>(ExecSpace(), s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                    lse.data());
  }
  void backward() {
    dq.poison();
    dk.poison();
    dv.poison();
    if constexpr (std::is_same_v<Impl, Gemms>)
      shardrl::gemm_attention_backward<T>(ExecSpace(), gemm, s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                     lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), workspace());
    else
      kernels::attention_backward<T>(ExecSpace(), s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                     lse.data(), dout.data(), dq.data(), dk.data(), dv.data());
  }
  // Replaces the inputs with x (already representable in T).
  void upload() {
    q.set(x.q);
    k.set(x.k);
    v.set(x.v);
    dout.set(x.dout);
    upload_positions();
  }
  void upload_positions() {
    ASSERT_EQ(static_cast<long>(x.pos.size()), tokens_of(s));
    auto h = Kokkos::create_mirror_view(pos);
    for (long n = 0; n < tokens_of(s); ++n) h(n) = x.pos[n];
    Kokkos::deep_copy(pos, h);
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

// Some element in [begin, end) differs: proves the perturbation reached the kernel, so the
// "unchanged" checks beside it can fail.
void expect_some_change(const std::vector<double>& a, const std::vector<double>& b, long begin, long end,
                        const std::string& what) {
  for (long e = begin; e < end; ++e)
    if (a[e] != b[e]) return;
  ADD_FAILURE() << what << ": nothing in [" << begin << ", " << end << ") changed";
}

template <class C>
class AttentionKernel : public ::testing::Test {};
using Cases = ::testing::Types<Case<Fused, float>, Case<Fused, bf16>, Case<Gemms, float>, Case<Gemms, bf16>>;
struct CaseNames {
  template <class C>
  static std::string GetName(int) {
    return std::string(std::is_same_v<typename C::Impl, Gemms> ? "Gemms" : "Fused") +
           (std::is_same_v<typename C::Type, bf16> ? "Bf16" : "Float");
  }
};
TYPED_TEST_SUITE(AttentionKernel, Cases, CaseNames);

TYPED_TEST(AttentionKernel, ForwardMatchesReference) {
  using T = typename TypeParam::Type;
  std::uint64_t seed = 100;
  for (const AttentionShape& s : all_shapes()) {
    SCOPED_TRACE(describe(s));
    Problem<T, typename TypeParam::Impl> p(s, seed += 10);
    p.forward();
    const Forward ref = reference_forward(s, p.x);
    expect_close(p.out.host(), ref.out, out_rtol<T>(), out_rtol<T>() * max_abs(ref.out), "out");
    expect_close(p.lse.host(), ref.lse, lse_tol(), lse_tol(), "lse");
  }
}

TYPED_TEST(AttentionKernel, BackwardMatchesReference) {
  using T = typename TypeParam::Type;
  std::uint64_t seed = 5000;
  for (const AttentionShape& s : all_shapes()) {
    SCOPED_TRACE(describe(s));
    Problem<T, typename TypeParam::Impl> p(s, seed += 10);
    p.forward();
    p.backward();
    const Grads ref = reference_backward(s, p.x);
    expect_close(p.dq.host(), ref.dq, grad_rtol<T>(), grad_atol_rel<T>() * dq_scale(s, p.x, ref.dq), "dq");
    expect_close(p.dk.host(), ref.dk, grad_rtol<T>(), grad_atol_rel<T>() * dk_scale(s, p.x, ref.dk), "dk");
    expect_close(p.dv.host(), ref.dv, grad_rtol<T>(), grad_atol_rel<T>() * max_abs(ref.dv), "dv");
  }
}

// Shapes for packed layouts (B >= 3 so every kind of row in random_row_lengths appears),
// including GQA (groups of 2 and 4), plain multi-head, S = 1 and a 64-wide head.
std::vector<AttentionShape> packed_shapes() {
  return {AttentionShape{3, 1, 4, 2, 8},   AttentionShape{3, 5, 1, 1, 8},  AttentionShape{3, 17, 4, 2, 16},
          AttentionShape{4, 33, 6, 3, 64}, AttentionShape{3, 33, 4, 4, 8}, AttentionShape{5, 24, 8, 2, 32}};
}

// Several sequences of random lengths per row (length-1 sequences and a sequence filling a
// whole row included), forward and backward against the reference.
TYPED_TEST(AttentionKernel, PackedMatchesReference) {
  using T = typename TypeParam::Type;
  std::uint64_t seed = 9000;
  for (const AttentionShape& s : packed_shapes()) {
    const RowLengths rows = random_row_lengths(s, seed += 10);
    SCOPED_TRACE(describe(s) + " lengths " + describe(rows));
    Problem<T, typename TypeParam::Impl> p(s, seed, packed_positions(s, rows));
    p.forward();
    p.backward();
    const Forward ref = reference_forward(s, p.x);
    expect_close(p.out.host(), ref.out, out_rtol<T>(), out_rtol<T>() * max_abs(ref.out), "out");
    expect_close(p.lse.host(), ref.lse, lse_tol(), lse_tol(), "lse");
    const Grads gref = reference_backward(s, p.x);
    expect_close(p.dq.host(), gref.dq, grad_rtol<T>(), grad_atol_rel<T>() * dq_scale(s, p.x, gref.dq), "dq");
    expect_close(p.dk.host(), gref.dk, grad_rtol<T>(), grad_atol_rel<T>() * dk_scale(s, p.x, gref.dk), "dk");
    expect_close(p.dv.host(), gref.dv, grad_rtol<T>(), grad_atol_rel<T>() * max_abs(gref.dv), "dv");
  }
}

// Elements [begin, begin + count) of `packed` equal all of `alone`, bit for bit.
void expect_identical_slice(const std::vector<double>& packed, long begin, const std::vector<double>& alone,
                            const std::string& what) {
  ASSERT_LE(begin + static_cast<long>(alone.size()), static_cast<long>(packed.size())) << what;
  const std::vector<double> slice(packed.begin() + begin, packed.begin() + begin + static_cast<long>(alone.size()));
  expect_identical(alone, slice, 0, static_cast<long>(alone.size()), what);
}

// Each sequence of a packed row gives, token by token, bit-identical (fused; to rounding for the
// GEMM implementation) out/lse/dq/dk/dv to the same sequence run alone (B = 1, S = len, right-padded): a token's keys, their order and the
// arithmetic on them do not depend on where the sequence sits, so this is exact, not approximate.
// It also shows that no sequence sees (or sends gradient to) its neighbours in the row.
TYPED_TEST(AttentionKernel, PackedSequencesMatchAlone) {
  using T = typename TypeParam::Type;
  using Impl = typename TypeParam::Impl;
  std::uint64_t seed = 12000;
  for (const AttentionShape& s : {AttentionShape{3, 17, 4, 2, 16}, AttentionShape{4, 33, 6, 3, 64},
                                  AttentionShape{3, 12, 2, 2, 8}}) {
    const RowLengths rows = random_row_lengths(s, seed += 10);
    SCOPED_TRACE(describe(s) + " lengths " + describe(rows));
    Problem<T, Impl> packed(s, seed, packed_positions(s, rows));
    packed.forward();
    packed.backward();
    const std::vector<double> got[5] = {packed.out.host(), packed.lse.host(), packed.dq.host(), packed.dk.host(),
                                        packed.dv.host()};
    const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
    const long q_tok = static_cast<long>(s.n_heads) * s.hd, kv_tok = static_cast<long>(s.n_kv_heads) * s.hd;
    const long per_token[5] = {q_tok, s.n_heads, q_tok, kv_tok, kv_tok};
    long first = 0;
    for (int b = 0; b < s.B; ++b)
      for (int len : rows[b]) {
        SCOPED_TRACE("sequence at token " + std::to_string(first) + ", length " + std::to_string(len));
        const AttentionShape one{1, len, s.n_heads, s.n_kv_heads, s.hd};
        Problem<T, Impl> alone(one, seed + 1);
        auto cut = [&](const std::vector<double>& all, long width) {
          return std::vector<double>(all.begin() + first * width, all.begin() + (first + len) * width);
        };
        alone.x.q = cut(packed.x.q, q_tok);
        alone.x.k = cut(packed.x.k, kv_tok);
        alone.x.v = cut(packed.x.v, kv_tok);
        alone.x.dout = cut(packed.x.dout, q_tok);
        alone.upload();
        alone.forward();
        alone.backward();
        const std::vector<double> want[5] = {alone.out.host(), alone.lse.host(), alone.dq.host(), alone.dk.host(),
                                             alone.dv.host()};
        for (int t = 0; t < 5; ++t) {
          if constexpr (std::is_same_v<Impl, Fused>) {
            expect_identical_slice(got[t], first * per_token[t], want[t], names[t]);
          } else {
            // The products run over the whole row, zeros included, and BLAS sums each dot
            // product in an order that depends on where the nonzero terms sit: equal to
            // rounding, not to the bit.
            const std::vector<double> slice(got[t].begin() + first * per_token[t],
                                            got[t].begin() + first * per_token[t] + static_cast<long>(want[t].size()));
            const double rtol[5] = {out_rtol<T>(), lse_tol(), grad_rtol<T>(), grad_rtol<T>(), grad_rtol<T>()};
            const double atol[5] = {out_rtol<T>() * max_abs(want[0]), lse_tol(),
                                    grad_atol_rel<T>() * dq_scale(one, alone.x, want[2]),
                                    grad_atol_rel<T>() * dk_scale(one, alone.x, want[3]),
                                    grad_atol_rel<T>() * max_abs(want[4])};
            expect_close(slice, want[t], rtol[t], atol[t], names[t]);
          }
        }
        first += len;
      }
    EXPECT_EQ(first, tokens_of(s));
  }
}

// Keys that are all zero give uniform weights: out_i is the mean of v_first..v_i and lse_i is
// log(i - first + 1), a result that does not depend on any reference implementation. Right
// padded (first = start of the row) and packed (first = start of the sequence, from the lengths).
TYPED_TEST(AttentionKernel, ZeroKeysAverageValues) {
  using T = typename TypeParam::Type;
  using Impl = typename TypeParam::Impl;
  const AttentionShape s{2, 17, 4, 2, 16};
  for (const RowLengths& rows : {RowLengths{{17}, {17}}, RowLengths{{1, 1, 5, 10}, {16, 1}}}) {
    SCOPED_TRACE(describe(rows));
    std::vector<long> first_of;  // first token of each token's sequence
    for (long b = 0; b < s.B; ++b) {
      long start = b * s.S;
      for (int len : rows[b]) {
        first_of.insert(first_of.end(), len, start);
        start += len;
      }
    }
    Problem<T, Impl> p(s, 7, packed_positions(s, rows));
    p.x.k.assign(kv_size(s), 0.0);
    p.upload();
    p.forward();
    const std::vector<double> out = p.out.host(), lse = p.lse.host();
    std::vector<double> want_out(out.size()), want_lse(lse.size());
    for (long n = 0; n < tokens_of(s); ++n) {
      const long first = first_of[n];
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
}

// Changing key/value at position t of every sequence leaves every earlier position of the
// forward bit-identical; changing query and dout at t leaves the backward of other queries and
// of later keys bit-identical.
TYPED_TEST(AttentionKernel, Causal) {
  using T = typename TypeParam::Type;
  using Impl = typename TypeParam::Impl;
  const AttentionShape s{2, 17, 6, 3, 16};
  const int t = 9;
  const long q_row = static_cast<long>(s.n_heads) * s.hd, kv_row = static_cast<long>(s.n_kv_heads) * s.hd;
  Problem<T, Impl> p(s, 21);
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
  using T = typename TypeParam::Type;
  using Impl = typename TypeParam::Impl;
  const AttentionShape s{3, 5, 4, 2, 8};
  const long q_seq = static_cast<long>(s.S) * s.n_heads * s.hd, kv_seq = static_cast<long>(s.S) * s.n_kv_heads * s.hd;
  const long lse_seq = static_cast<long>(s.S) * s.n_heads;
  Problem<T, Impl> p(s, 31);
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

// Two runs on the same inputs give bit-identical results (no atomics, fixed summation order),
// right-padded and packed.
TYPED_TEST(AttentionKernel, Deterministic) {
  using T = typename TypeParam::Type;
  using Impl = typename TypeParam::Impl;
  const AttentionShape s{3, 33, 6, 3, 64};
  for (std::vector<std::int32_t> pos : {right_padded_positions(s), packed_positions(s, random_row_lengths(s, 42))}) {
    Problem<T, Impl> p(s, 41, std::move(pos));
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
}

}  // namespace
}  // namespace shardrl::test
