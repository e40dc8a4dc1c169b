// Token log-probabilities (forward, backward) and the masked NLL reduction against fp64 host
// references; the reference backward is itself checked against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cross_entropy.hpp"

namespace shardrl::test {
namespace {

struct LogProbs {
  std::vector<double> logp, lse;
};

LogProbs reference_forward(const std::vector<double>& logits, const std::vector<double>& targets, int N, int V) {
  LogProbs r{std::vector<double>(N), std::vector<double>(N)};
  for (int n = 0; n < N; ++n) {
    const double* row = logits.data() + static_cast<long>(n) * V;
    const double m = *std::max_element(row, row + V);
    double sum = 0;
    for (int c = 0; c < V; ++c) sum += std::exp(row[c] - m);
    r.lse[n] = m + std::log(sum);
    r.logp[n] = row[static_cast<long>(targets[n])] - r.lse[n];
  }
  return r;
}

// dL/dlogits for L = sum_n dlogp(n) * logp(n): the softmax Jacobian row by row.
std::vector<double> reference_backward(const std::vector<double>& logits, const std::vector<double>& targets,
                                       const std::vector<double>& dlogp, int N, int V) {
  const LogProbs f = reference_forward(logits, targets, N, V);
  std::vector<double> d(logits.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < V; ++c) {
      const long e = static_cast<long>(n) * V + c;
      d[e] = dlogp[n] * ((c == static_cast<int>(targets[n]) ? 1.0 : 0.0) - std::exp(logits[e] - f.lse[n]));
    }
  return d;
}

std::vector<double> random_targets(int N, int V, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::vector<double> t(N);
  for (auto& x : t) x = dist(gen);
  t[0] = 0;              // both ends of the vocabulary
  t[N - 1] = V - 1;
  return t;
}

TEST(CrossEntropyReference, BackwardMatchesFiniteDifferences) {
  const int N = 3, V = 5;
  std::vector<double> logits = random_values<double>(N * V, 1, -3.0, 3.0);
  const std::vector<double> targets = {2, 0, 4};
  const std::vector<double> dlogp = {0.7, -1.3, 0.4};
  const std::vector<double> g = reference_backward(logits, targets, dlogp, N, V);
  auto loss = [&]() {
    const LogProbs f = reference_forward(logits, targets, N, V);
    double L = 0;
    for (int n = 0; n < N; ++n) L += dlogp[n] * f.logp[n];
    return L;
  };
  const double eps = 1e-5;
  for (int e = 0; e < N * V; ++e) {
    const double saved = logits[e];
    logits[e] = saved + eps;
    const double up = loss();
    logits[e] = saved - eps;
    const double down = loss();
    logits[e] = saved;
    EXPECT_NEAR(g[e], (up - down) / (2 * eps), 1e-8) << "element " << e;  // O(eps^2) + 1e-16/eps
  }
}

template <class T>
class TokenLogprobKernel : public ::testing::Test {};
using ActivationTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(TokenLogprobKernel, ActivationTypes);

// logp and lse are fp32 outputs computed in fp32 from inputs the reference sees exactly, so
// their error is fp32 roundoff (absolute, of the order of u |lse|, plus the V-term sum's
// relative error carried through log), whatever T is. Observed: about 2 u |lse|.
double logp_tol(double magnitude) { return 8 * unit_roundoff<float>() * std::max(1.0, magnitude); }
// dlogits is rounded to T (1 u of T relative); for float, exp(logit - lse) also carries the
// fp32 error of lse (absolute, ~ u |lse|), hence a relative tolerance scaled by |lse|.
template <class T>
double dlogits_rtol(double lse_magnitude) {
  return std::is_same_v<T, bf16> ? 1.5 * unit_roundoff<T>()
                                 : 16 * unit_roundoff<T>() * std::max(1.0, lse_magnitude);
}

struct Case {
  int N, V;
  double lo, hi;  // logit range
};

template <class T>
void check_forward_backward(const Case& c, std::uint64_t seed) {
  SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " logits in [" + std::to_string(c.lo) +
               ", " + std::to_string(c.hi) + ")");
  std::vector<double> logits, dlogp;
  Buffer<T> logits_d = random_buffer<T>(static_cast<long>(c.N) * c.V, seed, &logits, c.lo, c.hi);
  const std::vector<double> targets = random_targets(c.N, c.V, seed + 1);
  Buffer<std::int32_t> targets_d(c.N);
  targets_d.set(targets);
  Buffer<float> dlogp_d = random_buffer<float>(c.N, seed + 2, &dlogp);
  dlogp[c.N / 2] = 0;  // a masked token: its row must still be written (with zeros)
  dlogp_d.set(dlogp);

  Buffer<float> logp_d(c.N), lse_d(c.N);
  Buffer<T> dlogits_d(static_cast<long>(c.N) * c.V);
  logp_d.poison();
  lse_d.poison();
  dlogits_d.poison();
  kernels::token_logprob_forward<T>(ExecSpace(), logits_d.data(), targets_d.data(), logp_d.data(), lse_d.data(),
                                    c.N, c.V);
  kernels::token_logprob_backward<T>(ExecSpace(), logits_d.data(), targets_d.data(), lse_d.data(), dlogp_d.data(),
                                     dlogits_d.data(), c.N, c.V);

  const LogProbs ref = reference_forward(logits, targets, c.N, c.V);
  const double magnitude = std::max(std::fabs(c.lo), std::fabs(c.hi)) + std::log(static_cast<double>(c.V));
  expect_close(lse_d.host(), ref.lse, 0, logp_tol(magnitude), "lse");
  expect_close(logp_d.host(), ref.logp, 0, logp_tol(magnitude), "logp");
  const std::vector<double> want = reference_backward(logits, targets, dlogp, c.N, c.V);
  // Absolute floor: the softmax of one entry is tiny beside the 1 at the target.
  expect_close(dlogits_d.host(), want, dlogits_rtol<T>(magnitude), unit_roundoff<float>(), "dlogits");
}

TYPED_TEST(TokenLogprobKernel, MatchesReference) {
  std::uint64_t seed = 1000;
  for (int N : {1, 7, 33})
    for (int V : {3, 259, 1000}) check_forward_backward<TypeParam>(Case{N, V, -4.0, 4.0}, seed += 10);
}

// Logits around 100 overflow exp in fp32 unless the row max is subtracted first.
TYPED_TEST(TokenLogprobKernel, LargeLogitsStayFinite) {
  check_forward_backward<TypeParam>(Case{7, 259, 90.0, 120.0}, 77);
  check_forward_backward<TypeParam>(Case{7, 259, -120.0, -90.0}, 78);
}

// One row whose target dominates: the other probabilities are ~1e-13 and must still come out
// with relative accuracy (they are the gradient pushing those logits down), while at the target
// 1 - p cancels to within fp32 roundoff.
TYPED_TEST(TokenLogprobKernel, ConfidentRow) {
  using T = TypeParam;
  const int V = 259, target = 17;
  std::vector<double> logits(V, 0.0);
  logits[target] = 30.0;
  Buffer<T> logits_d(V);
  logits_d.set(logits);
  Buffer<std::int32_t> targets_d(1);
  targets_d.set({static_cast<double>(target)});
  Buffer<float> logp_d(1), lse_d(1), dlogp_d(1);
  dlogp_d.set({-1.0});
  Buffer<T> dlogits_d(V);
  logp_d.poison();
  lse_d.poison();
  dlogits_d.poison();
  kernels::token_logprob_forward<T>(ExecSpace(), logits_d.data(), targets_d.data(), logp_d.data(), lse_d.data(), 1, V);
  kernels::token_logprob_backward<T>(ExecSpace(), logits_d.data(), targets_d.data(), lse_d.data(), dlogp_d.data(),
                                     dlogits_d.data(), 1, V);
  const double rest = (V - 1) * std::exp(-30.0);  // sum of the other exp(logit - 30)
  expect_close(logp_d.host(), {-std::log1p(rest)}, 0, logp_tol(30.0), "logp");
  std::vector<double> got = dlogits_d.host();
  expect_close({got[target]}, {-rest / (1 + rest)}, 0, 2 * unit_roundoff<float>(), "dlogits at the target");
  got.erase(got.begin() + target);
  expect_close(got, std::vector<double>(V - 1, std::exp(-30.0) / (1 + rest)), dlogits_rtol<T>(30.0), 0,
               "dlogits elsewhere");
}

// masked_nll: the loss accumulates into what *loss already holds; dlogp = -scale * mask exactly.
// The fp32 sum of N terms of size <= scale * max|logp| errs by at most ~N u of that size.
TEST(MaskedNll, AccumulatesAndWritesGradient) {
  for (int N : {1, 7, 33, 1000}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    std::vector<double> logp, mask = random_values<float>(N, N + 5, 0.0, 1.0);
    Buffer<float> logp_d = random_buffer<float>(N, N, &logp, -9.0, 0.0);
    for (auto& m : mask) m = m < 0.3 ? 0.0 : 1.0;
    mask[0] = 1.0;
    Buffer<float> mask_d(N);
    mask_d.set(mask);
    const float scale = 1.0f / 37.0f;
    Buffer<float> loss_d(1), dlogp_d(N);
    loss_d.set({3.25});
    dlogp_d.poison();
    kernels::masked_nll(ExecSpace(), logp_d.data(), mask_d.data(), scale, loss_d.data(), dlogp_d.data(), N);

    double contribution = 0, size = 0;
    for (int n = 0; n < N; ++n) {
      contribution += -static_cast<double>(scale) * mask[n] * logp[n];
      size += std::fabs(static_cast<double>(scale) * mask[n] * logp[n]);
    }
    const double tol = 2 * N * unit_roundoff<float>() * size + unit_roundoff<float>() * 4;
    expect_close(loss_d.host(), {3.25 + contribution}, 0, tol, "loss");
    const std::vector<double> dlogp = dlogp_d.host();
    for (int n = 0; n < N; ++n)
      ASSERT_EQ(dlogp[n], static_cast<double>(-scale * static_cast<float>(mask[n]))) << "dlogp " << n;

    // A second call adds the same amount again (no reset of *loss).
    kernels::masked_nll(ExecSpace(), logp_d.data(), mask_d.data(), scale, loss_d.data(), dlogp_d.data(), N);
    expect_close(loss_d.host(), {3.25 + 2 * contribution}, 0, 2 * tol, "loss after two calls");
  }
}

// Masked-out tokens contribute nothing, even when their logp is garbage (padding).
TEST(MaskedNll, MaskedTokensContributeNothing) {
  const int N = 33;
  std::vector<double> logp = random_values<float>(N, 3, -5.0, 0.0), mask(N, 1.0);
  for (int n = 1; n < N; n += 3) mask[n] = 0.0;
  Buffer<float> mask_d(N), logp_d(N), loss_d(1), dlogp_d(N);
  mask_d.set(mask);
  logp_d.set(logp);
  loss_d.set({0.0});
  kernels::masked_nll(ExecSpace(), logp_d.data(), mask_d.data(), 0.5f, loss_d.data(), dlogp_d.data(), N);
  const double clean = loss_d.host()[0];

  for (int n = 1; n < N; n += 3) logp[n] = (n % 2) ? std::numeric_limits<double>::quiet_NaN() : -1e30;
  logp_d.set(logp);
  loss_d.set({0.0});
  kernels::masked_nll(ExecSpace(), logp_d.data(), mask_d.data(), 0.5f, loss_d.data(), dlogp_d.data(), N);
  EXPECT_EQ(loss_d.host()[0], clean);

  double want = 0;
  for (int n = 0; n < N; ++n)
    if (mask[n] != 0) want += -0.5 * logp[n];
  EXPECT_NEAR(clean, want, 2 * N * unit_roundoff<float>() * std::fabs(want));
}

}  // namespace
}  // namespace shardrl::test
