// Token log-probabilities (forward, backward; at a temperature, with the entropy) and the masked
// NLL reduction against fp64 host references; the reference backward is itself checked against
// finite differences.
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
  std::vector<double> logp, lse, entropy;
};

// z = logits / T, lse = logsumexp(z), logp = z[target] - lse, entropy = -sum p log p with
// p = softmax(z). T is passed as the float the kernel divides by, so the reference sees exactly
// the kernel's inputs; at T = 1, z is the logits themselves.
LogProbs reference_forward(const std::vector<double>& logits, const std::vector<double>& targets, double T, int N,
                           int V) {
  LogProbs r{std::vector<double>(N), std::vector<double>(N), std::vector<double>(N)};
  for (int n = 0; n < N; ++n) {
    const double* row = logits.data() + static_cast<long>(n) * V;
    const double m = *std::max_element(row, row + V) / T;
    double sum = 0;
    for (int c = 0; c < V; ++c) sum += std::exp(row[c] / T - m);
    r.lse[n] = m + std::log(sum);
    if (targets[n] < 0) continue;   // not scored: logp and entropy 0
    r.logp[n] = row[static_cast<long>(targets[n])] / T - r.lse[n];
    double h = 0;  // terms p * (lse - z) are all >= 0: no cancellation
    for (int c = 0; c < V; ++c) {
      const double log_p = row[c] / T - r.lse[n];
      h -= std::exp(log_p) * log_p;
    }
    r.entropy[n] = h;
  }
  return r;
}

// dL/dlogits for L = sum_n dlogp(n) * logp(n) + dentropy(n) * entropy(n) (no entropy term when
// dentropy is empty): with z = logits / T, dlogp/dz_v = 1[v == target] - p_v and
// dH/dz_v = -p_v (log p_v + H), and dz/dlogits = 1/T.
std::vector<double> reference_backward(const std::vector<double>& logits, const std::vector<double>& targets, double T,
                                       const std::vector<double>& dlogp, const std::vector<double>& dentropy, int N,
                                       int V) {
  const LogProbs f = reference_forward(logits, targets, T, N, V);
  std::vector<double> d(logits.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < V; ++c) {
      const long e = static_cast<long>(n) * V + c;
      const double log_p = logits[e] / T - f.lse[n];
      const double p = std::exp(log_p);
      double g = dlogp[n] * ((c == static_cast<int>(targets[n]) ? 1.0 : 0.0) - p);
      if (!dentropy.empty()) g -= dentropy[n] * p * (log_p + f.entropy[n]);
      d[e] = g / T;
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

// Central differences (step 1e-5) of loss() in each element of x against the gradient g.
template <class Loss>
void expect_central_differences(std::vector<double>& x, const Loss& loss, const std::vector<double>& g, double tol) {
  const double eps = 1e-5;
  for (std::size_t e = 0; e < x.size(); ++e) {
    const double saved = x[e];
    x[e] = saved + eps;
    const double up = loss();
    x[e] = saved - eps;
    const double down = loss();
    x[e] = saved;
    EXPECT_NEAR(g[e], (up - down) / (2 * eps), tol) << "element " << e;
  }
}

TEST(CrossEntropyReference, BackwardMatchesFiniteDifferences) {
  const int N = 3, V = 5;
  std::vector<double> logits = random_values<double>(N * V, 1, -3.0, 3.0);
  const std::vector<double> targets = {2, 0, 4};
  const std::vector<double> dlogp = {0.7, -1.3, 0.4};
  const std::vector<double> g = reference_backward(logits, targets, 1.0, dlogp, {}, N, V);
  auto loss = [&]() {
    const LogProbs f = reference_forward(logits, targets, 1.0, N, V);
    double L = 0;
    for (int n = 0; n < N; ++n) L += dlogp[n] * f.logp[n];
    return L;
  };
  expect_central_differences(logits, loss, g, 1e-8);   // O(eps^2) + 1e-16/eps
}

// The same at temperatures either side of 1 with an entropy term: checks the 1/T of z = logits / T
// and the entropy's gradient, which the RL entropy bonus trains through. Row 2 has only the
// entropy term.
TEST(CrossEntropyReference, TemperedEntropyBackwardMatchesFiniteDifferences) {
  const int N = 3, V = 5;
  const std::vector<double> targets = {2, 0, 4};
  const std::vector<double> dlogp = {0.7, -1.3, 0.0}, dentropy = {-0.4, 0.9, 1.1};
  for (double T : {0.7, 1.3}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::vector<double> logits = random_values<double>(N * V, 2, -3.0, 3.0);
    const std::vector<double> g = reference_backward(logits, targets, T, dlogp, dentropy, N, V);
    auto loss = [&]() {
      const LogProbs f = reference_forward(logits, targets, T, N, V);
      double L = 0;
      for (int n = 0; n < N; ++n) L += dlogp[n] * f.logp[n] + dentropy[n] * f.entropy[n];
      return L;
    };
    // O(eps^2) times a third derivative of order 1/T^3 < 3, plus 1e-16/eps.
    expect_central_differences(logits, loss, g, 1e-8);
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
  kernels::token_logprob_forward<T>(ExecSpace(), logits_d.data(), targets_d.data(), 1.0f, logp_d.data(),
                                    lse_d.data(), nullptr, c.N, c.V);
  kernels::token_logprob_backward<T>(ExecSpace(), logits_d.data(), targets_d.data(), 1.0f, lse_d.data(),
                                     dlogp_d.data(), nullptr, nullptr, dlogits_d.data(), c.N, c.V);

  const LogProbs ref = reference_forward(logits, targets, 1.0, c.N, c.V);
  const double magnitude = std::max(std::fabs(c.lo), std::fabs(c.hi)) + std::log(static_cast<double>(c.V));
  expect_close(lse_d.host(), ref.lse, 0, logp_tol(magnitude), "lse");
  expect_close(logp_d.host(), ref.logp, 0, logp_tol(magnitude), "logp");
  const std::vector<double> want = reference_backward(logits, targets, 1.0, dlogp, {}, c.N, c.V);
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
  kernels::token_logprob_forward<T>(ExecSpace(), logits_d.data(), targets_d.data(), 1.0f, logp_d.data(), lse_d.data(),
                                    nullptr, 1, V);
  kernels::token_logprob_backward<T>(ExecSpace(), logits_d.data(), targets_d.data(), 1.0f, lse_d.data(),
                                     dlogp_d.data(), nullptr, nullptr, dlogits_d.data(), 1, V);
  const double rest = (V - 1) * std::exp(-30.0);  // sum of the other exp(logit - 30)
  expect_close(logp_d.host(), {-std::log1p(rest)}, 0, logp_tol(30.0), "logp");
  std::vector<double> got = dlogits_d.host();
  expect_close({got[target]}, {-rest / (1 + rest)}, 0, 2 * unit_roundoff<float>(), "dlogits at the target");
  got.erase(got.begin() + target);
  expect_close(got, std::vector<double>(V - 1, std::exp(-30.0) / (1 + rest)), dlogits_rtol<T>(30.0), 0,
               "dlogits elsewhere");
}

// The head keeps one buffer for the logits and their gradient: backward in place gives the bits
// of backward into another buffer, for rows read in packs (V a multiple of the pack width) and
// rows that are not (V odd), with the entropy term at a temperature.
TYPED_TEST(TokenLogprobKernel, BackwardInPlaceEqualsOutOfPlace) {
  using T = TypeParam;
  for (int V : {1024, 1001}) {
    SCOPED_TRACE("V=" + std::to_string(V));
    const int N = 5;
    const long count = static_cast<long>(N) * V;
    std::vector<double> logits, dlogp, dentropy;
    Buffer<T> logits_d = random_buffer<T>(count, 91 + V, &logits, -6.0, 6.0);
    Buffer<T> in_place(count);
    in_place.set(logits);
    Buffer<std::int32_t> targets_d(N);
    targets_d.set(random_targets(N, V, 92));
    Buffer<float> dlogp_d = random_buffer<float>(N, 93, &dlogp), dentropy_d = random_buffer<float>(N, 94, &dentropy);
    Buffer<float> logp_d(N), lse_d(N), entropy_d(N);
    const float t = 0.7f;
    kernels::token_logprob_forward<T>(ExecSpace(), logits_d.data(), targets_d.data(), t, logp_d.data(), lse_d.data(),
                                      entropy_d.data(), N, V);
    Buffer<T> out_of_place(count);
    out_of_place.poison();
    kernels::token_logprob_backward<T>(ExecSpace(), logits_d.data(), targets_d.data(), t, lse_d.data(), dlogp_d.data(),
                                       entropy_d.data(), dentropy_d.data(), out_of_place.data(), N, V);
    kernels::token_logprob_backward<T>(ExecSpace(), in_place.data(), targets_d.data(), t, lse_d.data(), dlogp_d.data(),
                                       entropy_d.data(), dentropy_d.data(), in_place.data(), N, V);
    const std::vector<double> want = out_of_place.host(), got = in_place.host();
    for (long e = 0; e < count; ++e) ASSERT_EQ(got[e], want[e]) << "element " << e;
  }
}

// ---- At a temperature, with the entropy. Where terms can cancel (the entropy, a gradient with
// two terms, 1 - p at a likely target) a tolerance relative to the result does not bound the
// error, so these tolerances are first-order roundoff bounds per element, formed from the fp64
// reference's own quantities. Notation for one row: s_v = (logit_v - max) / T <= 0 as the kernel
// forms it, p = softmax(s), logZ = log sum_v exp(s_v), A = -sum_v p_v s_v = E|s|, H = logZ + A.

// |got - want| <= tol, element by element; reports the worst element.
void expect_within(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& tol,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  long worst = -1;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (err <= tol[i]) continue;  // NaN fails
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / tol[i];
    if (worst < 0 || ratio > worst_ratio) {
      worst = static_cast<long>(i);
      worst_ratio = ratio;
    }
  }
  if (worst >= 0)
    ADD_FAILURE() << what << ": element " << worst << " is " << got[worst] << ", reference " << want[worst]
                  << ", error " << std::fabs(got[worst] - want[worst]) << " > tolerance " << tol[worst];
}

// Relative error of a fp32 sum of V positive terms. The worst case, (V - 1) u, is not approached:
// the roundings go up as often as down (the model of Higham and Mary's probabilistic analysis),
// so the error is a sum of V independent terms of at most u, of standard deviation at most
// u sqrt(V/3); we allow 4 of them. A tree reduction (the GPU) errs by at most log2(V) u, less.
double sum_rtol(int V) { return 4 * std::sqrt(V / 3.0) * unit_roundoff<float>(); }

// The kernel's entropy, H = log(sum e) - sum(e s) / sum(e) with e_v = exp(s_v), errs by at most
//   sum_rtol * (1 + 2A)              the two V-term sums: log carries one, the ratio A both
//   + 2u sum_v p_v |s_v| |s_v + A|   each s_v rounded twice (subtract, divide), through
//                                    dH/ds_v = -p_v (s_v + A)
//   + u (4 (1 + 2A) + A)             expf (within 2 ulp, 4u, on CUDA) in both sums, the product e s
//   + u (2 logZ + A + H)             logf, the division, the final subtraction
// This is u times (|lse| + magnitude) in order, but sharper: the shift by the row max leaves no
// |lse| in it, and p-weighted moments of s take the place of the logits' range.
std::vector<double> entropy_tol(const std::vector<double>& logits, double T, int N, int V) {
  const double u = unit_roundoff<float>();
  std::vector<double> tol(N);
  for (int n = 0; n < N; ++n) {
    const double* row = logits.data() + static_cast<long>(n) * V;
    const double m = *std::max_element(row, row + V);
    std::vector<double> s(V);
    double Z = 0;
    for (int c = 0; c < V; ++c) Z += std::exp(s[c] = (row[c] - m) / T);
    double A = 0;
    for (int c = 0; c < V; ++c) A -= std::exp(s[c]) / Z * s[c];
    double spread = 0;
    for (int c = 0; c < V; ++c) spread += std::exp(s[c]) / Z * std::fabs(s[c]) * std::fabs(s[c] + A);
    const double logZ = std::log(Z), H = logZ + A;
    tol[n] = sum_rtol(V) * (1 + 2 * A) + u * (2 * spread + 4 * (1 + 2 * A) + A + 2 * logZ + A + H);
  }
  return tol;
}

// dlogits(n, v) = (t1 - t2) / T with t1 = dlogp (1[v == target] - p), t2 = dentropy p (log p + H).
// The kernel's log p = logits / T - lse carries lse's error (logp_tol), the rounding of logits / T
// and of the difference: e_lp = logp_tol(magnitude) + u (magnitude + |log p|); p = expf(log p)
// is relatively off by e_p = e_lp + 4u. The fp32 result is then off by at most
//   e32 = (|dlogp| p e_p + |dentropy| p (|log p + H| e_p + e_lp + tol_H) + 4u (|t1| + |t2|)) / T
// (the last term: the kernel's roundings of the two terms, their difference and the division by
// T), and rounding it to the activation type (to nearest) adds u_T |dlogits + e32|: the bound is
// (1 + u_T) e32 + u_T |dlogits|. For bf16 the last term is the whole of it and is reached (half
// an ulp). Near a likely target 1 - p cancels and near log p = -H so does the entropy factor:
// the bound follows the terms, not the result.
template <class T>
std::vector<double> dlogits_tol(const std::vector<double>& logits, const std::vector<double>& targets, double temp,
                                const std::vector<double>& dlogp, const std::vector<double>& dentropy,
                                const std::vector<double>& want, double magnitude, int N, int V) {
  const double u = unit_roundoff<float>();
  const LogProbs f = reference_forward(logits, targets, temp, N, V);
  const std::vector<double> tol_h = entropy_tol(logits, temp, N, V);
  std::vector<double> tol(logits.size());
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < V; ++c) {
      const long e = static_cast<long>(n) * V + c;
      const double log_p = logits[e] / temp - f.lse[n];
      const double p = std::exp(log_p);
      const double e_lp = logp_tol(magnitude) + u * (magnitude + std::fabs(log_p)), e_p = e_lp + 4 * u;
      const double t1 = std::fabs(dlogp[n] * ((c == static_cast<int>(targets[n]) ? 1.0 : 0.0) - p));
      double bound = std::fabs(dlogp[n]) * p * e_p + 4 * u * t1;
      if (!dentropy.empty()) {
        const double t2 = std::fabs(dentropy[n] * p * (log_p + f.entropy[n]));
        bound += std::fabs(dentropy[n]) * p * (std::fabs(log_p + f.entropy[n]) * e_p + e_lp + tol_h[n]) + 4 * u * t2;
      }
      tol[e] = (1 + unit_roundoff<T>()) * bound / temp + unit_roundoff<T>() * std::fabs(want[e]);
    }
  return tol;
}

// Forward and backward at temperature `temp`, with the entropy computed and trained through or
// (with_entropy false) both pointers nullptr, against the fp64 reference.
template <class T>
void check_tempered(const Case& c, float temp, bool with_entropy, std::uint64_t seed) {
  SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V) + " logits in [" + std::to_string(c.lo) +
               ", " + std::to_string(c.hi) + ") T=" + std::to_string(temp) +
               (with_entropy ? " with entropy" : " without entropy"));
  std::vector<double> logits, dlogp, dentropy;
  Buffer<T> logits_d = random_buffer<T>(static_cast<long>(c.N) * c.V, seed, &logits, c.lo, c.hi);
  std::vector<double> targets = random_targets(c.N, c.V, seed + 1);
  // A masked token: its row must still be written (with zeros); unscored where there are others
  // (target kUnscoredTarget: logp and entropy 0).
  if (c.N > 1) targets[c.N / 2] = -1;
  Buffer<std::int32_t> targets_d(c.N);
  targets_d.set(targets);
  Buffer<float> dlogp_d = random_buffer<float>(c.N, seed + 2, &dlogp);
  Buffer<float> dentropy_d = random_buffer<float>(c.N, seed + 3, &dentropy);
  dlogp[c.N / 2] = 0;
  dentropy[c.N / 2] = 0;
  dlogp_d.set(dlogp);
  dentropy_d.set(dentropy);
  if (!with_entropy) dentropy.clear();

  Buffer<float> logp_d(c.N), lse_d(c.N), entropy_d(c.N);
  Buffer<T> dlogits_d(static_cast<long>(c.N) * c.V);
  logp_d.poison();
  lse_d.poison();
  entropy_d.poison();
  dlogits_d.poison();
  float* entropy = with_entropy ? entropy_d.data() : nullptr;
  const float* dentropy_p = with_entropy ? dentropy_d.data() : nullptr;
  kernels::token_logprob_forward<T>(ExecSpace(), logits_d.data(), targets_d.data(), temp, logp_d.data(),
                                    lse_d.data(), entropy, c.N, c.V);
  kernels::token_logprob_backward<T>(ExecSpace(), logits_d.data(), targets_d.data(), temp, lse_d.data(),
                                     dlogp_d.data(), entropy, dentropy_p, dlogits_d.data(), c.N, c.V);

  // The reference divides by the float the kernel divides by.
  const double t = static_cast<double>(temp);
  const LogProbs ref = reference_forward(logits, targets, t, c.N, c.V);
  // As at T = 1, with z = logits / T in place of the logits: |lse| <= max|logit| / T + log V.
  const double magnitude = std::max(std::fabs(c.lo), std::fabs(c.hi)) / t + std::log(static_cast<double>(c.V));
  expect_close(lse_d.host(), ref.lse, 0, logp_tol(magnitude), "lse");
  expect_close(logp_d.host(), ref.logp, 0, logp_tol(magnitude), "logp");
  if (with_entropy) expect_within(entropy_d.host(), ref.entropy, entropy_tol(logits, t, c.N, c.V), "entropy");
  const std::vector<double> want = reference_backward(logits, targets, t, dlogp, dentropy, c.N, c.V);
  expect_within(dlogits_d.host(), want,
                dlogits_tol<T>(logits, targets, t, dlogp, dentropy, want, magnitude, c.N, c.V), "dlogits");
}

// The temperatures RL samples at, and 1, with the entropy on; the logits' scales of the tests
// above, the large ones included (exp overflows in fp32 unless the max is subtracted first).
TYPED_TEST(TokenLogprobKernel, TemperatureAndEntropyMatchReference) {
  std::uint64_t seed = 2000;
  for (float temp : {0.7f, 1.0f, 1.3f}) {
    for (int N : {1, 7, 33})
      for (int V : {3, 259, 1000}) check_tempered<TypeParam>(Case{N, V, -4.0, 4.0}, temp, true, seed += 10);
    check_tempered<TypeParam>(Case{7, 259, 90.0, 120.0}, temp, true, seed += 10);
    check_tempered<TypeParam>(Case{7, 259, -120.0, -90.0}, temp, true, seed += 10);
  }
}

// Without the entropy (both pointers nullptr) at T != 1: the entropy-free gradient, scaled by 1/T.
TYPED_TEST(TokenLogprobKernel, TemperatureWithoutEntropyMatchesReference) {
  std::uint64_t seed = 3000;
  for (float temp : {0.7f, 1.3f}) {
    for (int N : {1, 7, 33})
      for (int V : {3, 259, 1000}) check_tempered<TypeParam>(Case{N, V, -4.0, 4.0}, temp, false, seed += 10);
    check_tempered<TypeParam>(Case{7, 259, 90.0, 120.0}, temp, false, seed += 10);
  }
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
