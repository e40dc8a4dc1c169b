// Mixture-of-experts routing and permutation kernels against fp64 host references: router
// softmax, top-k selection (ties to the lower index) and gates, with and without
// renormalisation; the load-balancing loss against hand-computed values; the router's backward
// against finite differences of the fp64 reference; the expert permutation, its backward, and
// the gated combine and its backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/moe_router.hpp"

namespace shardrl::test {
namespace {

using kernels::RouterShape;

struct RouterRef {
  std::vector<double> probs, gate;
  std::vector<int> expert;
};

// The routing in fp64. `fixed` (if given) keeps the experts of a previous call, so finite
// differences see a smooth function.
RouterRef router_ref(const RouterShape& rs, bool renormalize, const std::vector<double>& logits,
                     const std::vector<int>* fixed = nullptr) {
  RouterRef r;
  r.probs.resize(static_cast<std::size_t>(rs.N) * rs.E);
  r.gate.resize(static_cast<std::size_t>(rs.N) * rs.k);
  r.expert.resize(r.gate.size());
  for (int n = 0; n < rs.N; ++n) {
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < rs.E; ++e) mx = std::max(mx, logits[n * rs.E + e]);
    for (int e = 0; e < rs.E; ++e) sum += std::exp(logits[n * rs.E + e] - mx);
    for (int e = 0; e < rs.E; ++e) r.probs[n * rs.E + e] = std::exp(logits[n * rs.E + e] - mx) / sum;
    std::vector<int> idx(rs.E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int a, int b) { return r.probs[n * rs.E + a] > r.probs[n * rs.E + b]; });
    double picked = 0;
    for (int s = 0; s < rs.k; ++s) {
      const int e = fixed ? (*fixed)[n * rs.k + s] : idx[s];
      r.expert[n * rs.k + s] = e;
      r.gate[n * rs.k + s] = r.probs[n * rs.E + e];
      picked += r.probs[n * rs.E + e];
    }
    if (renormalize)
      for (int s = 0; s < rs.k; ++s) r.gate[n * rs.k + s] /= picked;
  }
  return r;
}

// Counted tokens per expert, then (entry E) counted tokens; `counted` empty: every token.
std::vector<int> counts_of(const RouterShape& rs, const std::vector<int>& expert, const std::vector<int>& counted) {
  std::vector<int> c(rs.E + 1, 0);
  for (int n = 0; n < rs.N; ++n) {
    if (!counted.empty() && !counted[n]) continue;
    ++c[rs.E];
    for (int s = 0; s < rs.k; ++s) ++c[expert[n * rs.k + s]];
  }
  return c;
}

// The objective whose gradient router_backward computes: sum dgate * gate + aux loss over the
// counted tokens.
double router_objective(const RouterShape& rs, bool renormalize, double aux_coef, const std::vector<double>& logits,
                        const std::vector<double>& dgate, const std::vector<int>& fixed, const std::vector<int>& counted,
                        const std::vector<int>& counts) {
  const RouterRef r = router_ref(rs, renormalize, logits, &fixed);
  double f = 0;
  for (std::size_t a = 0; a < r.gate.size(); ++a) f += dgate[a] * r.gate[a];
  const double Nc = counts[rs.E];
  for (int e = 0; e < rs.E; ++e) {
    double P = 0;
    for (int n = 0; n < rs.N; ++n)
      if (counted.empty() || counted[n]) P += r.probs[n * rs.E + e];
    f += aux_coef * rs.E * (double(counts[e]) / Nc) * (P / Nc);
  }
  return f;
}

struct RouterRun {
  std::vector<double> probs, gate;
  std::vector<int> expert;
};

template <class T>
RouterRun run_router(const RouterShape& rs, bool renormalize, const std::vector<double>& logits) {
  Buffer<T> l(static_cast<long>(logits.size()));
  l.set(logits);
  Buffer<float> probs(static_cast<long>(rs.N) * rs.E), gate(static_cast<long>(rs.N) * rs.k);
  Buffer<std::int32_t> expert(static_cast<long>(rs.N) * rs.k);
  probs.poison();
  gate.poison();
  kernels::router_forward<T>(ExecSpace(), rs, renormalize, l.data(), probs.data(), expert.data(), gate.data());
  RouterRun out{probs.host(), gate.host(), {}};
  for (double e : expert.host()) out.expert.push_back(static_cast<int>(e));
  return out;
}

template <class T>
class MoeKernel : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(MoeKernel, KernelTypes);

TYPED_TEST(MoeKernel, RouterForwardMatchesReference) {
  using T = TypeParam;
  std::uint64_t seed = 10;
  for (const RouterShape rs : {RouterShape{1, 1, 1}, RouterShape{7, 4, 2}, RouterShape{33, 8, 2}, RouterShape{16, 64, 8},
                               RouterShape{5, 3, 3}})
    for (bool renormalize : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(rs.N) + " E=" + std::to_string(rs.E) + " k=" + std::to_string(rs.k) +
                   (renormalize ? " renormalised" : ""));
      const std::vector<double> logits = random_values<T>(static_cast<long>(rs.N) * rs.E, ++seed, -3.0, 3.0);
      const RouterRun got = run_router<T>(rs, renormalize, logits);
      const RouterRef want = router_ref(rs, renormalize, logits);
      // The probabilities come from fp32 exp and sums over E terms of exactly-known inputs.
      expect_close(got.probs, want.probs, 8 * rs.E * unit_roundoff<float>(), 0.0, "probs");
      EXPECT_EQ(got.expert, want.expert) << "selected experts";
      expect_close(got.gate, want.gate, 16 * rs.E * unit_roundoff<float>(), 0.0, "gate");
    }
}

// Exact ties go to the lower index: equal logits give equal probabilities bit for bit.
TYPED_TEST(MoeKernel, RouterTiesGoToTheLowerIndex) {
  using T = TypeParam;
  const RouterShape rs{2, 5, 3};
  const std::vector<double> logits = {0.5, 1.0, 1.0, -1.0, 1.0,    // experts 1, 2, 4 tie for the top
                                      0.0, 0.0, 0.0, 0.0, 0.0};   // all tie: 0, 1, 2
  const RouterRun got = run_router<T>(rs, true, logits);
  EXPECT_EQ(got.expert, (std::vector<int>{1, 2, 4, 0, 1, 2}));
  expect_close(got.gate, std::vector<double>(6, 1.0 / 3), 4 * unit_roundoff<float>(), 0.0, "tied gates");
}

// Probabilities chosen by hand (logits = their logs), top-1: experts 0, 1, 2, 0, so c = (2, 1, 1),
// P = (0.375, 0.325, 0.3) and L = coef * 3 * (2/4 * 0.375 + 1/4 * 0.325 + 1/4 * 0.3) = coef * 1.03125.
// Then the same four tokens among two padding tokens (both picking expert 1), which the counted
// mask leaves out: the same counts and loss. Counting them would give c = (2, 3, 1) over 6.
TEST(MoeRouter, AuxLossHandComputedPaddingLeftOut) {
  const std::vector<double> p = {0.5, 0.3, 0.2, 0.1, 0.6, 0.3, 0.2, 0.2, 0.6, 0.7, 0.2, 0.1};
  const std::vector<double> pad = {0.1, 0.8, 0.1};
  for (bool padded : {false, true}) {
    SCOPED_TRACE(padded ? "padded" : "no padding");
    std::vector<double> rows = p;
    std::vector<double> counted_h = {1, 1, 1, 1};
    if (padded) {   // padding at positions 1 and 4
      rows.insert(rows.begin() + 3, pad.begin(), pad.end());
      rows.insert(rows.end(), pad.begin(), pad.end());
      counted_h = {1, 0, 1, 1, 1, 0};
    }
    const RouterShape rs{static_cast<int>(counted_h.size()), 3, 1};
    std::vector<double> logits(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) logits[i] = std::log(rows[i]);
    Buffer<float> l(static_cast<long>(logits.size())), probs(static_cast<long>(logits.size())), gate(rs.N), loss(1);
    l.set(logits);
    Buffer<std::int32_t> expert(rs.N), counts(4), counted(rs.N);
    counted.set(counted_h);
    const std::int32_t* mask = padded ? counted.data() : nullptr;
    kernels::router_forward<float>(ExecSpace(), rs, false, l.data(), probs.data(), expert.data(), gate.data());
    kernels::router_counts(ExecSpace(), rs, expert.data(), mask, counts.data());
    kernels::router_aux_loss(ExecSpace(), rs, 0.01f, probs.data(), mask, counts.data(), loss.data());
    EXPECT_EQ(expert.host(), padded ? (std::vector<double>{0, 1, 1, 2, 0, 1}) : (std::vector<double>{0, 1, 2, 0}));
    EXPECT_EQ(counts.host(), (std::vector<double>{2, 1, 1, 4}));
    expect_close(loss.host(), {0.01 * 1.03125}, 1e-6, 0.0, "aux loss");
  }
}

// No counted token (a micro-batch of padding only): no loss, and no aux gradient.
TEST(MoeRouter, AuxLossOfOnlyPaddingIsZero) {
  const RouterShape rs{3, 4, 2};
  const std::vector<double> logits = random_values<float>(12, 77, -2.0, 2.0);
  Buffer<float> l(12), probs(12), gate(6), loss(1), dgate(6), dlogits(12);
  l.set(logits);
  dgate.set(std::vector<double>(6, 0.0));
  Buffer<std::int32_t> expert(6), counts(5), counted(3);
  counted.set({0, 0, 0});
  kernels::router_forward<float>(ExecSpace(), rs, true, l.data(), probs.data(), expert.data(), gate.data());
  kernels::router_counts(ExecSpace(), rs, expert.data(), counted.data(), counts.data());
  kernels::router_aux_loss(ExecSpace(), rs, 1.0f, probs.data(), counted.data(), counts.data(), loss.data());
  kernels::router_backward<float>(ExecSpace(), rs, true, 1.0f, probs.data(), expert.data(), gate.data(),
                                  counted.data(), counts.data(), dgate.data(), dlogits.data());
  EXPECT_EQ(counts.host(), std::vector<double>(5, 0.0));
  EXPECT_EQ(loss.host(), std::vector<double>{0.0});
  EXPECT_EQ(dlogits.host(), std::vector<double>(12, 0.0));
}

// router_backward against central differences of the fp64 objective (experts held fixed).
TYPED_TEST(MoeKernel, RouterBackwardMatchesFiniteDifferences) {
  using T = TypeParam;
  std::uint64_t seed = 500;
  for (const RouterShape rs : {RouterShape{6, 4, 2}, RouterShape{9, 8, 3}, RouterShape{4, 5, 1}})
    for (bool renormalize : {false, true})
      for (double aux_coef : {0.0, 0.1})
        for (bool padded : {false, true}) {
          SCOPED_TRACE("E=" + std::to_string(rs.E) + " k=" + std::to_string(rs.k) + (renormalize ? " renormalised" : "") +
                       " aux " + std::to_string(aux_coef) + (padded ? " padded" : ""));
          // Padded: every third token is padding, left out of the aux loss.
          std::vector<int> counted_h;
          for (int n = 0; padded && n < rs.N; ++n) counted_h.push_back(n % 3 != 1);
          Buffer<std::int32_t> counted(rs.N);
          if (padded) counted.set(std::vector<double>(counted_h.begin(), counted_h.end()));
          const std::int32_t* mask = padded ? counted.data() : nullptr;
          const std::vector<double> logits = random_values<T>(static_cast<long>(rs.N) * rs.E, ++seed, -2.0, 2.0);
          const std::vector<double> dgate = random_values<float>(static_cast<long>(rs.N) * rs.k, ++seed);
          Buffer<T> l(static_cast<long>(logits.size()));
          l.set(logits);
          Buffer<float> probs(static_cast<long>(rs.N) * rs.E), gate(static_cast<long>(rs.N) * rs.k),
              dg(static_cast<long>(rs.N) * rs.k);
          dg.set(dgate);
          Buffer<std::int32_t> expert(static_cast<long>(rs.N) * rs.k), counts(rs.E + 1);
          Buffer<T> dlogits(static_cast<long>(logits.size()));
          dlogits.poison();
          kernels::router_forward<T>(ExecSpace(), rs, renormalize, l.data(), probs.data(), expert.data(), gate.data());
          kernels::router_counts(ExecSpace(), rs, expert.data(), mask, counts.data());
          kernels::router_backward<T>(ExecSpace(), rs, renormalize, static_cast<float>(aux_coef), probs.data(),
                                      expert.data(), gate.data(), mask, counts.data(), dg.data(), dlogits.data());
          std::vector<int> fixed, c;
          for (double e : expert.host()) fixed.push_back(static_cast<int>(e));
          c = counts_of(rs, fixed, counted_h);
          std::vector<double> want_counts;
          for (int x : c) want_counts.push_back(x);
          EXPECT_EQ(counts.host(), want_counts) << "counts";
          std::vector<double> want(logits.size());
          const double h = 1e-5;
          for (std::size_t i = 0; i < logits.size(); ++i) {
            std::vector<double> up = logits, down = logits;
            up[i] += h;
            down[i] -= h;
            want[i] = (router_objective(rs, renormalize, aux_coef, up, dgate, fixed, counted_h, c) -
                       router_objective(rs, renormalize, aux_coef, down, dgate, fixed, counted_h, c)) /
                      (2 * h);
          }
          double scale = 0;
          for (double w : want) scale = std::max(scale, std::fabs(w));
          // fp32 arithmetic, then one rounding to T; finite differences of fp64 are good to ~h^2.
          expect_close(dlogits.host(), want, 2 * unit_roundoff<T>(), 1e-5 * scale + 1e-9, "dlogits");
        }
}

TEST(MoePermutation, GroupsAssignmentsByExpertInTokenOrder) {
  const int N = 5, k = 2, E = 4;
  const std::vector<std::int32_t> expert = {3, 1, 1, 0, 3, 2, 1, 3, 0, 1};
  std::vector<std::int32_t> order(N * k), pos(N * k), offsets(E + 1);
  kernels::build_expert_permutation(expert.data(), N, k, E, order.data(), pos.data(), offsets.data());
  EXPECT_EQ(offsets, (std::vector<std::int32_t>{0, 2, 6, 7, 10}));
  EXPECT_EQ(order, (std::vector<std::int32_t>{3, 8, 1, 2, 6, 9, 5, 0, 4, 7}));
  for (int p = 0; p < N * k; ++p) EXPECT_EQ(pos[order[p]], p);
}

template <class T>
void check_permute_and_combine(std::uint64_t seed) {
  const int N = 13, k = 3, E = 6, D = 17;
  const int A = N * k;
  std::vector<std::int32_t> expert(A);
  for (int n = 0; n < N; ++n)
    for (int s = 0; s < k; ++s) expert[n * k + s] = (n * 5 + s * 2 + static_cast<int>(seed)) % E;
  std::vector<std::int32_t> order(A), pos(A), offsets(E + 1);
  kernels::build_expert_permutation(expert.data(), N, k, E, order.data(), pos.data(), offsets.data());
  Buffer<std::int32_t> order_d(A), pos_d(A);
  order_d.set(std::vector<double>(order.begin(), order.end()));
  pos_d.set(std::vector<double>(pos.begin(), pos.end()));
  std::vector<double> x, yp, dout, dxp, gate, dx0;
  Buffer<T> x_d = random_buffer<T>(static_cast<long>(N) * D, seed + 1, &x);
  Buffer<T> yp_d = random_buffer<T>(static_cast<long>(A) * D, seed + 2, &yp);
  Buffer<T> dout_d = random_buffer<T>(static_cast<long>(N) * D, seed + 3, &dout);
  Buffer<T> dxp_d = random_buffer<T>(static_cast<long>(A) * D, seed + 4, &dxp);
  Buffer<float> gate_d = random_buffer<float>(A, seed + 5, &gate, 0.0, 1.0);
  Buffer<T> xp_d(static_cast<long>(A) * D), out_d(static_cast<long>(N) * D), dx_d(static_cast<long>(N) * D),
      dyp_d(static_cast<long>(A) * D);
  Buffer<float> dgate_d(A);
  for (auto* b : {&xp_d, &out_d, &dx_d, &dyp_d}) b->poison();
  dgate_d.poison();
  const ExecSpace space;
  kernels::moe_permute<T>(space, N, k, D, order_d.data(), x_d.data(), xp_d.data());
  kernels::moe_combine<T>(space, N, k, D, pos_d.data(), gate_d.data(), yp_d.data(), out_d.data(), false);
  kernels::moe_permute_backward<T>(space, N, k, D, pos_d.data(), dxp_d.data(), dx_d.data(), false);
  kernels::moe_combine_backward<T>(space, N, k, D, pos_d.data(), gate_d.data(), yp_d.data(), dout_d.data(),
                                   dyp_d.data(), dgate_d.data());
  std::vector<double> xp(static_cast<std::size_t>(A) * D), out(static_cast<std::size_t>(N) * D, 0.0),
      dx(out.size(), 0.0), dyp(xp.size()), dg(A, 0.0);
  for (int p = 0; p < A; ++p)
    for (int d = 0; d < D; ++d) xp[p * D + d] = x[(order[p] / k) * D + d];
  for (int n = 0; n < N; ++n)
    for (int s = 0; s < k; ++s) {
      const int a = n * k + s, p = pos[a];
      for (int d = 0; d < D; ++d) {
        out[n * D + d] += gate[a] * yp[p * D + d];
        dx[n * D + d] += dxp[p * D + d];
        dyp[p * D + d] = gate[a] * dout[n * D + d];
        dg[a] += dout[n * D + d] * yp[p * D + d];
      }
    }
  const double u = unit_roundoff<T>();
  expect_close(xp_d.host(), xp, 0.0, 0.0, "permute (a copy)");
  expect_close(out_d.host(), out, u, 4 * k * u, "combine");
  expect_close(dx_d.host(), dx, u, 4 * k * u, "permute backward");
  expect_close(dyp_d.host(), dyp, u, 0.0, "combine backward: dyp");
  expect_close(dgate_d.host(), dg, 0.0, 8 * D * unit_roundoff<float>(), "combine backward: dgate");
  // Accumulating forms add to what is there.
  std::vector<double> base = random_values<T>(static_cast<long>(N) * D, seed + 6);
  out_d.set(base);
  kernels::moe_combine<T>(space, N, k, D, pos_d.data(), gate_d.data(), yp_d.data(), out_d.data(), true);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] += base[i];
  expect_close(out_d.host(), out, u, 4 * (k + 1) * u, "combine, accumulating");
}

TYPED_TEST(MoeKernel, PermuteAndCombineMatchReference) {
  check_permute_and_combine<TypeParam>(3);
  check_permute_and_combine<TypeParam>(8);
}

}  // namespace
}  // namespace shardrl::test
