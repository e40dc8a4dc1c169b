// GRPO token loss kernel against hand-computed single-token cases and an fp64 host reference
// (each KL estimator, the truncated importance weight, the entropy bonus), its gradients against
// central finite differences of the fp64 loss, padding that holds NaN, and the statistics (sums
// add across calls, the ratio maximum keeps the larger). Advantages: tests/test_advantage.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "rl/grpo.hpp"

namespace shardrl::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU = unit_roundoff<float>();
constexpr KlEstimator kEstimators[] = {KlEstimator::k1, KlEstimator::k2, KlEstimator::k3, KlEstimator::low_var_kl};

const char* estimator_name(KlEstimator e) {
  switch (e) {
    case KlEstimator::k1: return "k1";
    case KlEstimator::k2: return "k2";
    case KlEstimator::k3: return "k3";
    case KlEstimator::low_var_kl: return "low_var_kl";
  }
  return "?";
}

double f32(double x) { return static_cast<float>(x); }

// ----------------------------------------------------------------------------- fp64 reference

// The KL estimators at d = logp - ref_logp, from their definitions (not the kernel's expm1 form):
// k1 = d, k2 = d^2 / 2, k3 = e^-d + d - 1, low_var_kl = min(k3(clamp(d, -20, 20)), 10) with a zero
// gradient where either clamp acts. Writes d(kl)/d(logp) to dkl.
double reference_kl(KlEstimator e, double d, double* dkl) {
  switch (e) {
    case KlEstimator::k1: *dkl = 1; return d;
    case KlEstimator::k2: *dkl = d; return d * d / 2;
    case KlEstimator::k3: *dkl = 1 - std::exp(-d); return std::exp(-d) + d - 1;
    case KlEstimator::low_var_kl: {
      const double c = std::clamp(d, -20.0, 20.0);
      const double k3 = std::exp(-c) + c - 1;
      if (k3 > 10) {
        *dkl = 0;
        return 10;
      }
      *dkl = c == d ? 1 - std::exp(-c) : 0.0;
      return k3;
    }
  }
  ADD_FAILURE() << "unknown estimator";
  return kNaN;
}

// Whether low_var_kl's clamps act at d (its value is then exactly 10, its gradient exactly 0).
bool low_var_clamped(double d) {
  const double c = std::clamp(d, -20.0, 20.0);
  return c != d || std::exp(-c) + c - 1 > 10;
}

// The magnitude of the terms an fp32 evaluation of the estimator sums (for tolerances): k3 is
// (e^-d - 1) + d, which cancels to d^2 / 2 as d -> 0, so its error scales with |e^-d - 1|, not
// with the result.
double kl_terms(KlEstimator e, double d) {
  double dkl = 0;
  const double kl = std::fabs(reference_kl(e, d, &dkl));
  if (e == KlEstimator::k3 || (e == KlEstimator::low_var_kl && !low_var_clamped(d))) return kl + std::fabs(std::expm1(-d));
  return kl;
}

struct Tokens {
  std::vector<double> logp, old_logp, ref_logp, advantage, weight;  // ref_logp empty: no KL
  std::vector<double> is_weight, entropy;                           // empty: nullptr (c = 1; no entropy)
  int size() const { return static_cast<int>(logp.size()); }
};

struct LossResult {
  std::vector<double> dlogp;
  std::vector<double> dentropy;   // empty when the tokens have no entropy
  std::array<double, kGrpoStats> stats{};
};

// One token in fp64, straight from the header's definition (min of the two terms; the gradient of
// the term min selects, ties to the unclipped one).
struct TokenTerms {
  double loss = 0, kl = 0, dkl = 0, ratio = 0;
  double grad = 0;        // d(loss)/d(logp), unweighted
  bool clipped = false;
  double loss_size = 0;   // sum of the magnitudes of the loss's terms (fp32 error scales with it)
  double grad_size = 0;   // the same for the gradient
  double kl_size = 0;     // kl_terms
};

TokenTerms reference_token(const Tokens& t, int n, double lp, double H, const GrpoLossOptions& o) {
  TokenTerms r;
  const double A = t.advantage[n];
  const double c = t.is_weight.empty() ? 1.0 : t.is_weight[n];
  const double lo = 1.0 - static_cast<double>(o.clip_low), hi = 1.0 + static_cast<double>(o.clip_high);
  const double kl_coef = o.kl_coef, entropy_coef = o.entropy_coef;
  r.ratio = std::exp(lp - t.old_logp[n]);
  const double unclipped = r.ratio * A, clipped = std::clamp(r.ratio, lo, hi) * A;
  const double surrogate = std::min(unclipped, clipped);
  const double dsurrogate = unclipped <= clipped ? A * r.ratio : 0.0;
  if (!t.ref_logp.empty()) {
    const double d = lp - t.ref_logp[n];
    r.kl = reference_kl(o.kl_estimator, d, &r.dkl);
    r.kl_size = kl_terms(o.kl_estimator, d);
  }
  if (t.entropy.empty()) H = 0;
  r.clipped = clipped < unclipped;
  r.loss = -c * surrogate + kl_coef * r.kl - entropy_coef * H;
  r.grad = -c * dsurrogate + kl_coef * r.dkl;
  r.loss_size = std::fabs(c * surrogate) + kl_coef * r.kl_size + entropy_coef * std::fabs(H);
  r.grad_size = std::fabs(c * dsurrogate) + kl_coef * std::fabs(r.dkl);
  return r;
}

TokenTerms reference_token(const Tokens& t, int n, const GrpoLossOptions& o) {
  return reference_token(t, n, t.logp[n], t.entropy.empty() ? 0.0 : t.entropy[n], o);
}

LossResult reference_loss(const Tokens& t, const GrpoLossOptions& o) {
  LossResult r;
  r.dlogp.assign(t.logp.size(), 0.0);
  if (!t.entropy.empty()) r.dentropy.assign(t.entropy.size(), 0.0);
  for (int n = 0; n < t.size(); ++n) {
    const double w = t.weight[n];
    if (w == 0) continue;
    const TokenTerms k = reference_token(t, n, o);
    r.dlogp[n] = w * k.grad;
    if (!t.entropy.empty()) r.dentropy[n] = -w * static_cast<double>(o.entropy_coef);
    r.stats[kGrpoLoss] += w * k.loss;
    r.stats[kGrpoKl] += w * k.kl;
    r.stats[kGrpoClipped] += k.clipped ? w : 0.0;
    r.stats[kGrpoWeight] += w;
    r.stats[kGrpoRatioSum] += k.ratio;
    r.stats[kGrpoTokens] += 1;
    r.stats[kGrpoRatioMax] = std::max(r.stats[kGrpoRatioMax], k.ratio);
  }
  return r;
}

// ----------------------------------------------------------------------------- the kernel

// The kernel on device copies of t. dlogp and dentropy are poisoned and have guard elements past
// N, so an unwritten or out-of-range element shows; without entropy, dentropy must stay untouched.
// stats_in is what stats holds before the call; `calls` > 1 runs the kernel again on the same buffers.
LossResult run_kernel(const Tokens& t, const GrpoLossOptions& o, std::array<double, kGrpoStats> stats_in = {},
                      int calls = 1) {
  const int N = t.size();
  Buffer<float> logp(N), old_logp(N), ref_logp(std::max(N, 1)), advantage(N), weight(N), is_weight(std::max(N, 1)),
      entropy(std::max(N, 1)), dlogp(N + kGuard), dentropy(N + kGuard), stats(kGrpoStats);
  logp.set(t.logp);
  old_logp.set(t.old_logp);
  if (!t.ref_logp.empty()) ref_logp.set(t.ref_logp);
  advantage.set(t.advantage);
  weight.set(t.weight);
  if (!t.is_weight.empty()) is_weight.set(t.is_weight);
  if (!t.entropy.empty()) entropy.set(t.entropy);
  dlogp.poison();
  dentropy.poison();
  stats.set(std::vector<double>(stats_in.begin(), stats_in.end()));
  for (int c = 0; c < calls; ++c)
    grpo_token_loss(ExecSpace(), logp.data(), old_logp.data(), t.ref_logp.empty() ? nullptr : ref_logp.data(),
                    advantage.data(), weight.data(), t.is_weight.empty() ? nullptr : is_weight.data(),
                    t.entropy.empty() ? nullptr : entropy.data(), o, N, dlogp.data(), dentropy.data(), stats.data());
  LossResult r;
  r.dlogp = dlogp.host();
  expect_guard_untouched(r.dlogp, N, "dlogp");
  r.dlogp.resize(N);
  const std::vector<double> de = dentropy.host();
  if (t.entropy.empty()) {
    expect_guard_untouched(de, 0, "dentropy without entropy");
  } else {
    r.dentropy = de;
    expect_guard_untouched(r.dentropy, N, "dentropy");
    r.dentropy.resize(N);
  }
  const std::vector<double> s = stats.host();
  std::copy(s.begin(), s.end(), r.stats.begin());
  return r;
}

// Asymmetric clipping (as in DAPO) so that a swap of the two bounds shows.
GrpoLossOptions asymmetric(float kl_coef = 0.0f, KlEstimator estimator = KlEstimator::k3, float entropy_coef = 0.0f) {
  GrpoLossOptions o;
  o.clip_low = 0.2f;    // ratio >= 0.8
  o.clip_high = 0.28f;  // ratio <= 1.28
  o.kl_coef = kl_coef;
  o.kl_estimator = estimator;
  o.entropy_coef = entropy_coef;
  return o;
}

struct HandCase {
  const char* what;
  double logp, old_logp, ref_logp, advantage, weight;  // ref_logp NaN: no reference policy
  float kl_coef;
  double loss, kl, clipped, dlogp;                     // expected weighted stats and gradient
};

// One token at a time, with the values worked out by hand (e^0.5 = 1.6487212707001282,
// e^-0.5 = 0.6065306597126334, e^0.2 = 1.2214027581601699, e^-0.25 = 0.7788007830714049).
TEST(GrpoTokenLoss, HandComputedCases) {
  const HandCase cases[] = {
      // ratio 1: surrogate = A, gradient -A * ratio.
      {"unclipped, ratio 1", -1.0, -1.0, kNaN, 0.5, 1.0, 0.0f, -0.5, 0, 0, -0.5},
      // A > 0, ratio 1.6487 > 1.28: min picks 1.28 * A; no gradient; counted as clipped (weighted).
      {"clipped high, A > 0", -0.5, -1.0, kNaN, 2.0, 0.25, 0.0f, 0.25 * -2.56, 0, 0.25, 0},
      // A > 0, ratio 1.2214: inside [0.8, 1.28] (it would be clipped by 1 + clip_low = 1.2).
      {"inside the high bound, A > 0", -0.8, -1.0, kNaN, 1.0, 1.0, 0.0f, -1.2214027581601699, 0, 0,
       -1.2214027581601699},
      // A < 0, ratio 0.6065 < 0.8: min picks 0.8 * A; no gradient; clipped.
      {"clipped low, A < 0", -1.5, -1.0, kNaN, -1.0, 1.0, 0.0f, 0.8, 0, 1, 0},
      // A < 0, ratio 0.7788 < 0.8 (it would be inside with 1 - clip_high = 0.72): clipped.
      {"just below the low bound, A < 0", -1.25, -1.0, kNaN, -1.0, 1.0, 0.0f, 0.8, 0, 1, 0},
      // A > 0, ratio 0.6065 < 0.8: ratio * A is the smaller term, so min keeps it: gradient flows.
      {"min picks unclipped, A > 0 low", -1.5, -1.0, kNaN, 1.0, 1.0, 0.0f, -0.6065306597126334, 0, 0,
       -0.6065306597126334},
      // A < 0, ratio 1.6487 > 1.28: ratio * A is the smaller term again.
      {"min picks unclipped, A < 0 high", -0.5, -1.0, kNaN, -1.0, 1.0, 0.0f, 1.6487212707001282, 0, 0,
       1.6487212707001282},
      // KL (k3, the default): d = logp - ref = 0.5: k3 = e^-0.5 + 0.5 - 1 = 0.10653065971263342,
      // dk3/dlogp = 1 - e^-0.5. A = 0 leaves only the KL term; kl_coef 0.1 scales loss and
      // gradient, not the KL statistic.
      {"KL only", -1.0, -1.0, -1.5, 0.0, 1.0, 0.1f, 0.1 * 0.10653065971263342, 0.10653065971263342, 0,
       0.1 * 0.3934693402873666},
      // KL with the surrogate, weight 2: loss = 2 * (-0.5 + 0.1 * k3), gradient 2 * (-0.5 + 0.1 * (1 - e^-0.5)).
      {"KL plus surrogate, weight 2", -1.0, -1.0, -1.5, 0.5, 2.0, 0.1f, 2 * (-0.5 + 0.1 * 0.10653065971263342),
       2 * 0.10653065971263342, 0, 2 * (-0.5 + 0.1 * 0.3934693402873666)},
      // kl_coef 0 with a reference: the KL is still measured but neither loss nor gradient see it.
      {"KL measured, not trained", -1.0, -1.0, -1.5, 0.5, 1.0, 0.0f, -0.5, 0.10653065971263342, 0, -0.5},
      // Weight 0 with garbage inputs: nothing at all, and dlogp exactly 0.
      {"weight 0, NaN inputs", kNaN, kInf, kNaN, kNaN, 0.0, 0.1f, 0, 0, 0, 0},
  };
  for (const HandCase& c : cases) {
    SCOPED_TRACE(c.what);
    Tokens t{{c.logp}, {c.old_logp}, {}, {c.advantage}, {c.weight}, {}, {}};
    if (!std::isnan(c.ref_logp) || c.weight == 0) t.ref_logp = {c.ref_logp};
    const LossResult r = run_kernel(t, asymmetric(c.kl_coef));
    // Inputs are rounded to fp32 (e.g. -0.8), then exp and a few operations: a few u relative.
    const double tol = 8 * kU;
    expect_close(r.dlogp, {c.dlogp}, tol, tol, "dlogp");
    expect_close({r.stats[kGrpoLoss]}, {c.loss}, tol, tol, "loss");
    // k3 = expm1(-d) + d loses |d| / k3 ~ 5x to cancellation here.
    expect_close({r.stats[kGrpoKl]}, {c.kl}, 5 * tol, tol, "kl");
    EXPECT_EQ(r.stats[kGrpoClipped], c.clipped);
    EXPECT_EQ(r.stats[kGrpoWeight], c.weight);
    // The ratio statistics are unweighted: one token, its ratio (exp of the fp32 inputs' difference).
    const double ratio = c.weight == 0 ? 0.0 : std::exp(f32(c.logp) - f32(c.old_logp));
    EXPECT_EQ(r.stats[kGrpoTokens], c.weight == 0 ? 0.0 : 1.0);
    expect_close({r.stats[kGrpoRatioSum]}, {ratio}, 2 * kU, 0, "ratio sum");
    expect_close({r.stats[kGrpoRatioMax]}, {ratio}, 2 * kU, 0, "ratio max");
    if (c.weight == 0) {
      EXPECT_EQ(r.dlogp[0], 0.0);
      for (double s : r.stats) EXPECT_EQ(s, 0.0);
    }
  }
}

// The new terms by hand on one token (logp -1, ref -1.5: d = 0.5; old -1: ratio 1; A = 0.5):
// k1 = 0.5, k2 = 0.125, k3 = 0.10653065971263342 (dk1 = 1, dk2 = 0.5, dk3 = 1 - e^-0.5 =
// 0.3934693402873666); the importance weight c scales the surrogate term only; the entropy bonus
// enters the loss (not dlogp) and dentropy = -w * entropy_coef.
TEST(GrpoTokenLoss, EstimatorsImportanceWeightAndEntropyByHand) {
  struct Case {
    const char* what;
    KlEstimator estimator;
    double is_weight, entropy, weight;   // is_weight / entropy NaN: nullptr
    float kl_coef, entropy_coef;
    double loss, kl, dlogp, dentropy;    // expected (weighted)
  };
  const double k3 = 0.10653065971263342, dk3 = 0.3934693402873666;
  const Case cases[] = {
      {"k1", KlEstimator::k1, kNaN, kNaN, 1.0, 0.1f, 0.0f, -0.5 + 0.1 * 0.5, 0.5, -0.5 + 0.1, 0},
      {"k2", KlEstimator::k2, kNaN, kNaN, 1.0, 0.1f, 0.0f, -0.5 + 0.1 * 0.125, 0.125, -0.5 + 0.1 * 0.5, 0},
      {"k3", KlEstimator::k3, kNaN, kNaN, 1.0, 0.1f, 0.0f, -0.5 + 0.1 * k3, k3, -0.5 + 0.1 * dk3, 0},
      {"low_var_kl unclamped", KlEstimator::low_var_kl, kNaN, kNaN, 1.0, 0.1f, 0.0f, -0.5 + 0.1 * k3, k3,
       -0.5 + 0.1 * dk3, 0},
      // c = 0.25: -c * A = -0.125 in loss and gradient; the KL term is not scaled by c.
      {"is_weight 0.25", KlEstimator::k1, 0.25, kNaN, 1.0, 0.1f, 0.0f, -0.125 + 0.05, 0.5, -0.125 + 0.1, 0},
      // H = 2, entropy_coef 0.01, weight 2: loss 2 * (-0.5 + 0.05 - 0.02), dentropy -0.02.
      {"entropy bonus, weight 2", KlEstimator::k1, kNaN, 2.0, 2.0, 0.1f, 0.01f, 2 * (-0.5 + 0.05 - 0.02), 2 * 0.5,
       2 * (-0.5 + 0.1), -0.02},
      {"all on", KlEstimator::k2, 0.5, 1.5, 0.5, 0.2f, 0.1f, 0.5 * (-0.25 + 0.2 * 0.125 - 0.15), 0.5 * 0.125,
       0.5 * (-0.25 + 0.2 * 0.5), -0.05},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Tokens t{{-1.0}, {-1.0}, {-1.5}, {0.5}, {c.weight}, {}, {}};
    if (!std::isnan(c.is_weight)) t.is_weight = {c.is_weight};
    if (!std::isnan(c.entropy)) t.entropy = {c.entropy};
    const LossResult r = run_kernel(t, asymmetric(c.kl_coef, c.estimator, c.entropy_coef));
    // fp32 coefficients (0.1f, 0.01f, 0.2f are not the decimal values: up to u relative) and a
    // few operations: 8u of the largest term.
    const double tol = 8 * kU;
    expect_close(r.dlogp, {c.dlogp}, tol, tol, "dlogp");
    expect_close({r.stats[kGrpoLoss]}, {c.loss}, tol, tol, "loss");
    expect_close({r.stats[kGrpoKl]}, {c.kl}, 5 * tol, tol, "kl");
    if (!std::isnan(c.entropy)) {
      expect_close(r.dentropy, {c.dentropy}, tol, 0, "dentropy");
    }
    EXPECT_EQ(r.stats[kGrpoWeight], c.weight);
    EXPECT_EQ(r.stats[kGrpoTokens], 1.0);
    EXPECT_EQ(r.stats[kGrpoRatioSum], 1.0);
    EXPECT_EQ(r.stats[kGrpoRatioMax], 1.0);
  }
}

// Random tokens: logp in [-5, 0], ratio in about [0.6, 1.65] (both sides clipped, both signs of A),
// a reference policy within +-1 nat, a third of the tokens padding (weight 0) holding NaN/inf.
// Ratios within 1e-4 of a clip bound are moved off it, so fp32 and fp64 agree on the branch
// and finite differences do not straddle the kink.
Tokens random_tokens(int N, std::uint64_t seed, const GrpoLossOptions& o) {
  Tokens t;
  t.logp = random_values<float>(N, seed, -5.0, 0.0);
  const std::vector<double> delta = random_values<float>(N, seed + 1, -0.5, 0.5);
  const std::vector<double> dref = random_values<float>(N, seed + 2, -1.0, 1.0);
  t.advantage = random_values<float>(N, seed + 3, -2.0, 2.0);
  t.weight = random_values<float>(N, seed + 4, 0.0, 1.0);
  t.old_logp.resize(N);
  t.ref_logp.resize(N);
  const double lo = 1.0 - static_cast<double>(o.clip_low), hi = 1.0 + static_cast<double>(o.clip_high);
  for (int n = 0; n < N; ++n) {
    double d = delta[n];
    while (std::fabs(std::exp(d) - lo) < 1e-4 || std::fabs(std::exp(d) - hi) < 1e-4) d += 1e-3;
    t.old_logp[n] = static_cast<float>(t.logp[n] - d);
    t.ref_logp[n] = static_cast<float>(t.logp[n] + dref[n]);
    if (n != 0 && t.weight[n] < 0.33) {  // token 0 is always trained
      t.weight[n] = 0.0;
      t.logp[n] = (n % 3 == 0) ? kNaN : (n % 3 == 1 ? kInf : -kInf);
      t.old_logp[n] = (n % 2) ? kNaN : -1e30;
      t.ref_logp[n] = kNaN;
      t.advantage[n] = (n % 2) ? kInf : kNaN;
    }
  }
  return t;
}

// Turns on the truncated importance weight (c in [0.2, 2]) and the entropy input (H in [0, 3]
// nats); padding tokens hold NaN or inf there too.
void add_is_weight_and_entropy(Tokens& t, std::uint64_t seed) {
  t.is_weight = random_values<float>(t.size(), seed, 0.2, 2.0);
  t.entropy = random_values<float>(t.size(), seed + 1, 0.0, 3.0);
  for (int n = 0; n < t.size(); ++n)
    if (t.weight[n] == 0) {
      t.is_weight[n] = (n % 2) ? kNaN : kInf;
      t.entropy[n] = (n % 2) ? kInf : kNaN;
    }
}

// fp32 kernel vs fp64 reference. Per token: exp of an fp32 difference and a few operations,
// a few u of the largest term (c |A| ratio <= 6.6, kl_coef |dkl| <= 0.1). Sums of N terms: at most
// ~N u of the sum of the terms' magnitudes (a sequential fp32 sum; a tree does better). The token
// count is exact (integers < 2^24 in fp32); the maximum is one fp32 ratio (exp: 2u).
// dentropy = -w * entropy_coef is one fp32 product of fp32 values: correctly rounded, so exact.
void check_against_reference(const Tokens& t, const GrpoLossOptions& o) {
  const LossResult want = reference_loss(t, o);
  const LossResult got = run_kernel(t, o);
  expect_close(got.dlogp, want.dlogp, 8 * kU, 8 * kU * 4, "dlogp");
  for (int n = 0; n < t.size(); ++n)
    if (t.weight[n] == 0) {
      ASSERT_EQ(got.dlogp[n], 0.0) << "padding token " << n;
    }
  ASSERT_EQ(got.dentropy.size(), t.entropy.size());
  for (int n = 0; n < static_cast<int>(t.entropy.size()); ++n) {
    const double exact = t.weight[n] == 0 ? 0.0 : f32(-t.weight[n] * static_cast<double>(o.entropy_coef));
    ASSERT_EQ(got.dentropy[n], exact) << "dentropy, token " << n;
  }
  std::array<double, kGrpoStats> size{};
  for (int n = 0; n < t.size(); ++n) {
    if (t.weight[n] == 0) continue;
    const TokenTerms k = reference_token(t, n, o);
    size[kGrpoLoss] += t.weight[n] * k.loss_size;
    size[kGrpoKl] += t.weight[n] * k.kl_size;
    size[kGrpoClipped] += t.weight[n];
    size[kGrpoWeight] += t.weight[n];
    size[kGrpoRatioSum] += k.ratio;
  }
  const char* names[kGrpoStats] = {"loss", "kl", "clipped", "weight", "ratio sum", "tokens", "ratio max"};
  for (int k = 0; k < kGrpoStats; ++k) {
    if (k == kGrpoTokens) {
      EXPECT_EQ(got.stats[k], want.stats[k]) << names[k];
    } else if (k == kGrpoRatioMax) {
      expect_close({got.stats[k]}, {want.stats[k]}, 2 * kU, 0, names[k]);
    } else {
      const double tol = (2.0 * t.size() + 8) * kU * size[k] + 4 * kU;
      expect_close({got.stats[k]}, {want.stats[k]}, 0, tol, names[k]);
    }
  }
}

TEST(GrpoTokenLoss, MatchesReference) {
  std::uint64_t seed = 500;
  for (int N : {1, 7, 33, 1000, 4099})
    for (float kl_coef : {0.0f, 0.05f}) {
      SCOPED_TRACE("N=" + std::to_string(N) + " kl_coef=" + std::to_string(kl_coef));
      const GrpoLossOptions o = asymmetric(kl_coef);
      Tokens t = random_tokens(N, seed += 10, o);
      check_against_reference(t, o);
      // Without a reference policy the KL is 0 and drops out of loss and gradient.
      t.ref_logp.clear();
      check_against_reference(t, o);
    }
}

// Every KL estimator, with and without the importance weight and the entropy bonus.
TEST(GrpoTokenLoss, MatchesReferenceEveryEstimatorImportanceWeightAndEntropy) {
  std::uint64_t seed = 2000;
  for (KlEstimator e : kEstimators)
    for (bool extras : {false, true})
      for (int N : {1, 33, 1000, 4099}) {
        SCOPED_TRACE(std::string(estimator_name(e)) + (extras ? " with is_weight and entropy" : "") +
                     " N=" + std::to_string(N));
        const GrpoLossOptions o = asymmetric(0.05f, e, extras ? 0.01f : 0.0f);
        Tokens t = random_tokens(N, seed += 10, o);
        if (extras) add_is_weight_and_entropy(t, seed + 5);
        check_against_reference(t, o);
      }
}

// The random inputs really exercise every branch (else MatchesReference proves less than it seems).
TEST(GrpoTokenLoss, RandomInputsCoverAllBranches) {
  const GrpoLossOptions o = asymmetric(0.05f);
  const Tokens t = random_tokens(1000, 510, o);
  int high = 0, low = 0, min_keeps = 0, inside = 0, padding = 0;
  for (int n = 0; n < t.size(); ++n) {
    if (t.weight[n] == 0) {
      ++padding;
      continue;
    }
    const double ratio = std::exp(t.logp[n] - t.old_logp[n]), A = t.advantage[n];
    if (ratio > 1.28) (A > 0 ? high : min_keeps)++;
    else if (ratio < 0.8) (A < 0 ? low : min_keeps)++;
    else ++inside;
  }
  EXPECT_GT(high, 20);
  EXPECT_GT(low, 20);
  EXPECT_GT(min_keeps, 40);
  EXPECT_GT(inside, 100);
  EXPECT_GT(padding, 100);
}

// ----------------------------------------------------------------------------- KL estimators

// (logp, ref_logp) pairs, fp32 values, for the estimators: d = logp - ref_logp at 0 and one ulp
// either side, near 0, moderate, beyond low_var_kl's +-20 log-ratio clamp, where k3 > 10 (so
// low_var_kl clamps its value: d < -2.61 or d > 11), at the clamps' edges, and random ones over
// [-1, 1], [-5, 5] and [-30, 30]. Random points within 1e-3 of a low_var_kl kink are skipped (fp32
// and fp64 could take different sides).
std::vector<std::pair<double, double>> kl_points() {
  std::vector<std::pair<double, double>> p;
  auto add = [&](double lp, double d) { p.emplace_back(f32(lp), f32(f32(lp) - d)); };
  p.emplace_back(-1.0, -1.0);                                           // d = 0
  p.emplace_back(-1.0, std::nextafter(-1.0f, 0.0f));                    // d = -2^-24
  p.emplace_back(-1.0, std::nextafter(-1.0f, -2.0f));                   // d = +2^-23
  p.emplace_back(-2.5, std::nextafter(-2.5f, 0.0f));
  for (double d : {1e-6, -1e-6, 1e-4, -1e-4, 1e-3, -1e-3, 0.5, -0.5, 2.0, -2.5, -3.0, -4.0, 10.5, 11.5, 15.0, 19.5,
                   20.0, -20.0, 20.5, -20.5, 25.0, -25.0, 30.0, -30.0})
    add(-1.0, d);
  std::uint64_t seed = 4242;
  for (double range : {1.0, 5.0, 30.0}) {
    const std::vector<double> lp = random_values<float>(40, seed++, -5.0, 0.0);
    const std::vector<double> d = random_values<float>(40, seed++, -range, range);
    for (int i = 0; i < 40; ++i) {
      const double df = f32(lp[i] - f32(lp[i] - d[i]));
      const double c = std::clamp(df, -20.0, 20.0);
      if (std::fabs(std::fabs(df) - 20) < 1e-3 || std::fabs(std::exp(-c) + c - 1 - 10) < 1e-3) continue;
      add(lp[i], d[i]);
    }
  }
  return p;
}

// How far an fp32 kl_estimate may be from reference_kl(d). It is evaluated at df = fp32(logp -
// ref_logp), so the exact change of the fp64 estimator from d to df is allowed in full; then
// expm1f (<= 2 ulp) and one add (k3), or two multiplies (k2): 4u of the magnitude of the terms.
// k1's value is df itself and its gradient exactly 1; low_var_kl where clamped is exactly 10 and 0.
// Plus the fp64 reference's own rounding of e^-d + d - 1 (4 eps of its terms).
std::pair<double, double> kl_tolerance(KlEstimator e, double d, double df) {
  double dkl_d = 0, dkl_df = 0;
  const double kl_d = reference_kl(e, d, &dkl_d), kl_df = reference_kl(e, df, &dkl_df);
  double kl_tol = std::fabs(kl_df - kl_d), dkl_tol = std::fabs(dkl_df - dkl_d);
  const double em1 = std::fabs(std::expm1(-df));
  if (e == KlEstimator::k2) {
    kl_tol += 4 * kU * kl_df;
  } else if (e == KlEstimator::k3 || (e == KlEstimator::low_var_kl && !low_var_clamped(df))) {
    kl_tol += 4 * kU * (em1 + std::fabs(kl_df)) + 4 * DBL_EPSILON * (std::exp(-d) + std::fabs(d) + 1);
    dkl_tol += 4 * kU * em1 + 4 * DBL_EPSILON * std::exp(-d);
  }
  return {kl_tol, dkl_tol};
}

// Each estimator's value and gradient against the fp64 definition, one token per kernel call
// (A = 0, weight 1, kl_coef 1: the KL statistic is the token's kl and dlogp its dkl exactly), and
// kl_estimate called on the host (the RL loop's KL in the reward) against the same.
TEST(GrpoTokenLoss, KlEstimatorsMatchReference) {
  const std::vector<std::pair<double, double>> points = kl_points();
  for (KlEstimator e : kEstimators) {
    SCOPED_TRACE(estimator_name(e));
    int near_zero = 0, beyond_20 = 0, value_clamped = 0;
    for (const auto& [lp, ref] : points) {
      const double d = lp - ref;   // exact: both are fp32
      const double df = f32(d);    // what the kernel computes
      double dkl = 0;
      const double kl = reference_kl(e, d, &dkl);
      const auto [kl_tol, dkl_tol] = kl_tolerance(e, d, df);
      const std::string at = "d = " + std::to_string(d) + " (logp " + std::to_string(lp) + ")";
      Tokens t{{lp}, {lp}, {ref}, {0.0}, {1.0}, {}, {}};
      const LossResult r = run_kernel(t, asymmetric(1.0f, e));
      EXPECT_NEAR(r.stats[kGrpoKl], kl, kl_tol) << "kernel kl, " << at;
      EXPECT_NEAR(r.dlogp[0], dkl, dkl_tol) << "kernel dkl, " << at;
      EXPECT_EQ(r.stats[kGrpoLoss], r.stats[kGrpoKl]) << at;   // A = 0: loss = kl_coef * kl
      float host_kl = 0, host_dkl = 0;
      kl_estimate(e, static_cast<float>(df), host_kl, host_dkl);
      EXPECT_NEAR(host_kl, kl, kl_tol) << "host kl, " << at;
      EXPECT_NEAR(host_dkl, dkl, dkl_tol) << "host dkl, " << at;
      if (e == KlEstimator::low_var_kl && low_var_clamped(d)) {
        EXPECT_EQ(r.stats[kGrpoKl], 10.0) << at;
        EXPECT_EQ(r.dlogp[0], 0.0) << at;
      }
      if (e == KlEstimator::k1) {
        EXPECT_EQ(r.dlogp[0], 1.0) << at;
      }
      near_zero += d != 0 && std::fabs(d) < 1e-3;
      beyond_20 += std::fabs(d) > 20;
      value_clamped += std::fabs(d) < 20 && low_var_clamped(d);
    }
    EXPECT_GE(near_zero, 6);
    EXPECT_GE(beyond_20, 10);
    EXPECT_GE(value_clamped, 10);
  }
}

// low_var_kl stays exactly 10 with a zero gradient where k3 overflows fp32 (d = -100) and where d
// is infinite (logp = -inf; ref_logp = -inf): its log-ratio clamp is what keeps e^-d + d from
// becoming inf - inf = NaN at d = -inf (for finite |d| > 20 the value clamp alone gives the same).
TEST(GrpoTokenLoss, LowVarKlIsBoundedAtExtremeLogRatios) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [lp, ref] : {std::pair<double, double>{-1.0, 99.0}, {-inf, -1.0}, {-1.0, -inf}, {-200.0, -1.0}}) {
    const std::string at = "logp " + std::to_string(lp) + ", ref_logp " + std::to_string(ref);
    double dkl = -1;
    EXPECT_EQ(reference_kl(KlEstimator::low_var_kl, lp - ref, &dkl), 10.0) << at;
    EXPECT_EQ(dkl, 0.0) << at;
    Tokens t{{lp}, {-1.0}, {ref}, {0.0}, {1.0}, {}, {}};
    const LossResult r = run_kernel(t, asymmetric(1.0f, KlEstimator::low_var_kl));
    EXPECT_EQ(r.stats[kGrpoKl], 10.0) << at;
    EXPECT_EQ(r.stats[kGrpoLoss], 10.0) << at;
    EXPECT_EQ(r.dlogp[0], 0.0) << at;
    float kl = 0, host_dkl = -1;
    kl_estimate(KlEstimator::low_var_kl, static_cast<float>(lp - ref), kl, host_dkl);
    EXPECT_EQ(kl, 10.0f) << at;
    EXPECT_EQ(host_dkl, 0.0f) << at;
  }
}

// ----------------------------------------------------------------------------- gradients

// dlogp is the derivative of the weighted loss: central differences of the fp64 loss
// L(logp) = sum_n w_n loss_n(logp_n), against both the fp64 reference gradient (tight) and the
// kernel's fp32 gradient (fp32 tolerance). The step (1e-6) is far from the kinks (>= 1e-4 away).
TEST(GrpoTokenLoss, GradientMatchesFiniteDifferences) {
  const int N = 33;
  for (float kl_coef : {0.0f, 0.3f}) {
    SCOPED_TRACE("kl_coef=" + std::to_string(kl_coef));
    const GrpoLossOptions o = asymmetric(kl_coef);
    const Tokens t = random_tokens(N, 900, o);
    const LossResult ref = reference_loss(t, o);
    const LossResult got = run_kernel(t, o);
    auto total_loss = [&](int m, double lp_m) {
      double L = 0;
      for (int n = 0; n < N; ++n)
        if (t.weight[n] != 0) L += t.weight[n] * reference_token(t, n, n == m ? lp_m : t.logp[n], 0.0, o).loss;
      return L;
    };
    const double h = 1e-6;
    int nonzero = 0;
    for (int n = 0; n < N; ++n) {
      if (t.weight[n] == 0) continue;
      const double fd = (total_loss(n, t.logp[n] + h) - total_loss(n, t.logp[n] - h)) / (2 * h);
      EXPECT_NEAR(ref.dlogp[n], fd, 1e-7) << "reference, token " << n;  // O(h^2) + 1e-16 * |L| / h
      EXPECT_NEAR(got.dlogp[n], fd, 8 * kU * 4 + 1e-7) << "kernel, token " << n;
      nonzero += fd != 0.0;
    }
    EXPECT_GT(nonzero, N / 3);  // not a vacuous check on clipped tokens only
  }
}

// The same per token for every estimator, with the importance weight and the entropy bonus on and
// some log-ratios to the reference far out (d = -3, 12, 25: k3 > 10, so low_var_kl is clamped and
// its gradient 0; k1, k2 and k3 are not). The entropy is an input of the loss too: dentropy
// against central differences in H. Tolerances: the finite difference is exact to O(h^2 f''') +
// eps |loss_n| / h ~ 1e-10 (1 + |loss_n|), checked at 1e-8; the kernel adds 8u of the gradient's
// terms, and for the KL the effect of rounding d to fp32, u |d| |d(dkl)/dd| = u |d| e^-d (k3).
TEST(GrpoTokenLoss, GradientMatchesFiniteDifferencesEveryEstimator) {
  const int N = 64;
  const double h = 1e-6;
  for (KlEstimator e : kEstimators) {
    SCOPED_TRACE(estimator_name(e));
    const GrpoLossOptions o = asymmetric(0.3f, e, 0.02f);
    Tokens t = random_tokens(N, 3100, o);
    add_is_weight_and_entropy(t, 3200);
    const double far[] = {-3.0, 12.0, 25.0};
    int f = 0;
    for (int n = 0; n < N && f < 3; ++n)
      if (t.weight[n] != 0 && n % 4 == 1) t.ref_logp[n] = f32(t.logp[n] - far[f++]);
    ASSERT_EQ(f, 3);
    const LossResult ref = reference_loss(t, o);
    const LossResult got = run_kernel(t, o);
    int nonzero = 0, clamped = 0;
    for (int n = 0; n < N; ++n) {
      const double w = t.weight[n];
      if (w == 0) continue;
      const double H = t.entropy[n];
      auto loss = [&](double lp, double h_n) { return w * reference_token(t, n, lp, h_n, o).loss; };
      const double fd = (loss(t.logp[n] + h, H) - loss(t.logp[n] - h, H)) / (2 * h);
      const double fd_h = (loss(t.logp[n], H + h) - loss(t.logp[n], H - h)) / (2 * h);
      const TokenTerms k = reference_token(t, n, o);
      const double d = t.logp[n] - t.ref_logp[n];
      const double fd_tol = 1e-8 * (1 + w * (k.loss_size + k.grad_size));
      const double d_rounding = static_cast<double>(o.kl_coef) * kU * std::fabs(d) * std::max(1.0, std::exp(-d));
      EXPECT_NEAR(ref.dlogp[n], fd, fd_tol) << "reference, token " << n << ", d " << d;
      EXPECT_NEAR(got.dlogp[n], fd, fd_tol + w * (8 * kU * k.grad_size + 2 * d_rounding))
          << "kernel, token " << n << ", d " << d;
      EXPECT_NEAR(ref.dentropy[n], fd_h, fd_tol) << "reference dentropy, token " << n;
      EXPECT_NEAR(got.dentropy[n], fd_h, kU * w * static_cast<double>(o.entropy_coef) + fd_tol)
          << "kernel dentropy, token " << n;
      nonzero += fd != 0.0;
      clamped += e == KlEstimator::low_var_kl && low_var_clamped(d);
    }
    EXPECT_GT(nonzero, N / 3);
    if (e == KlEstimator::low_var_kl) {
      EXPECT_EQ(clamped, 3);
    }
  }
}

// ----------------------------------------------------------------------------- statistics

// The ratio statistics by hand: unweighted over the tokens with w > 0 (a padding token with a
// larger ratio, finite or NaN, is left out), the same whatever the weights.
TEST(GrpoTokenLoss, RatioStatisticsByHand) {
  // logp - old_logp = 0.5, -0.5, 0.2 (fp32: 0.19999999), then padding at 3.0 and NaN.
  Tokens t{{-0.5, -1.5, -0.8, 2.0, kNaN},
           {-1.0, -1.0, -1.0, -1.0, -1.0},
           {},
           {1.0, -1.0, 0.5, 1.0, 1.0},
           {0.25, 1.0, 2.0, 0.0, 0.0},
           {},
           {}};
  const double e05 = 1.6487212707001282, em05 = 0.6065306597126334;
  const double e02 = std::exp(f32(-0.8) + 1.0);   // 1.2214027581601699 to 1e-8
  const LossResult r = run_kernel(t, asymmetric());
  EXPECT_EQ(r.stats[kGrpoTokens], 3.0);
  expect_close({r.stats[kGrpoRatioSum]}, {e05 + em05 + e02}, 6 * kU, 0, "ratio sum");   // 3 exps, 2 adds
  expect_close({r.stats[kGrpoRatioMax]}, {e05}, 2 * kU, 0, "ratio max");
  // Weights scaled by 3: the weighted sums change, the ratio statistics do not (bit for bit).
  Tokens heavier = t;
  for (double& w : heavier.weight) w *= 3;
  const LossResult s = run_kernel(heavier, asymmetric());
  EXPECT_EQ(s.stats[kGrpoWeight], 3 * r.stats[kGrpoWeight]);
  for (int k : {kGrpoRatioSum, kGrpoTokens, kGrpoRatioMax}) EXPECT_EQ(s.stats[k], r.stats[k]) << "stat " << k;
}

// stats accumulate into what they hold; dlogp is overwritten, not accumulated. Two calls from
// zero give exactly twice one call for the sums (s + s is exact) and the same maximum; from a
// non-zero start, start + 2 s and the larger of the two maxima.
TEST(GrpoTokenLoss, StatsAccumulate) {
  const GrpoLossOptions o = asymmetric(0.05f);
  const Tokens t = random_tokens(257, 77, o);
  const LossResult once = run_kernel(t, o);
  const LossResult twice = run_kernel(t, o, {}, 2);
  for (int k = 0; k < kGrpoStats; ++k) {
    EXPECT_NE(once.stats[k], 0.0) << "stat " << k;
    if (k == kGrpoRatioMax) {
      EXPECT_EQ(twice.stats[k], once.stats[k]) << "stat " << k;
    } else {
      EXPECT_EQ(twice.stats[k], 2 * once.stats[k]) << "stat " << k;
    }
  }
  EXPECT_EQ(twice.dlogp, once.dlogp);

  for (double start_max : {0.5, 1000.0}) {   // below and above the tokens' largest ratio
    SCOPED_TRACE("start max " + std::to_string(start_max));
    const std::array<double, kGrpoStats> start = {3.25, -1.5, 7.0, 100.0, 12.5, 40.0, start_max};
    const LossResult from_start = run_kernel(t, o, start, 2);
    for (int k = 0; k < kGrpoStats; ++k) {
      if (k == kGrpoRatioMax) {
        EXPECT_EQ(from_start.stats[k], std::max(start_max, once.stats[k]));
        continue;
      }
      EXPECT_NEAR(from_start.stats[k], start[k] + 2 * once.stats[k],
                  4 * kU * (std::fabs(start[k]) + 2 * std::fabs(once.stats[k])))
          << "stat " << k;
    }
  }
}

// Two calls on different tokens into the same stats (two micro-batches): each sum is the fp32 sum
// of the two calls' sums (exactly: the second call adds its own reduction once), the maximum is
// the larger of the two, whichever call had it.
TEST(GrpoTokenLoss, StatsAccumulateAcrossCalls) {
  const GrpoLossOptions o = asymmetric(0.05f, KlEstimator::k2, 0.01f);
  Tokens big = random_tokens(257, 177, o);
  Tokens small = random_tokens(129, 178, o);
  add_is_weight_and_entropy(big, 179);
  add_is_weight_and_entropy(small, 180);
  for (int n = 0; n < small.size(); ++n)   // halve the log-ratios: ratios within about [0.78, 1.28]
    if (small.weight[n] != 0) small.old_logp[n] = f32(small.logp[n] - 0.5 * (small.logp[n] - small.old_logp[n]));
  const LossResult a = run_kernel(big, o), b = run_kernel(small, o);
  ASSERT_GT(a.stats[kGrpoRatioMax], b.stats[kGrpoRatioMax]);
  for (bool big_first : {true, false}) {
    SCOPED_TRACE(big_first ? "big first" : "small first");
    const LossResult& first = big_first ? a : b;
    const LossResult both = run_kernel(big_first ? small : big, o, first.stats);
    const LossResult& second = big_first ? b : a;
    for (int k = 0; k < kGrpoStats; ++k) {
      const float sum = static_cast<float>(first.stats[k]) + static_cast<float>(second.stats[k]);   // fp32 add
      const double want = k == kGrpoRatioMax ? std::max(first.stats[k], second.stats[k]) : sum;
      EXPECT_EQ(both.stats[k], want) << "stat " << k;
    }
    EXPECT_EQ(both.stats[kGrpoRatioMax], a.stats[kGrpoRatioMax]);
    EXPECT_EQ(both.stats[kGrpoTokens], a.stats[kGrpoTokens] + b.stats[kGrpoTokens]);
  }
}

// ----------------------------------------------------------------------------- padding

// t with every padding token (weight 0) holding finite values instead (an importance weight and
// entropy of 1 where t has them).
Tokens with_finite_padding(Tokens t) {
  for (int n = 0; n < t.size(); ++n)
    if (t.weight[n] == 0) {
      t.logp[n] = -1.0;
      t.old_logp[n] = -2.0;
      t.ref_logp[n] = -1.0;
      t.advantage[n] = 1.0;
      if (!t.is_weight.empty()) t.is_weight[n] = 1.0;
      if (!t.entropy.empty()) t.entropy[n] = 1.0;
    }
  return t;
}

// Padding contributes nothing whatever it holds: the same tokens with finite padding values and
// with NaN/inf padding give bit-identical stats, and dlogp exactly 0 there.
TEST(GrpoTokenLoss, PaddingContributesNothing) {
  const GrpoLossOptions o = asymmetric(0.05f);
  const Tokens garbage = random_tokens(101, 31, o);
  const Tokens finite = with_finite_padding(garbage);
  const LossResult a = run_kernel(garbage, o), b = run_kernel(finite, o);
  for (int k = 0; k < kGrpoStats; ++k) {
    EXPECT_TRUE(std::isfinite(a.stats[k])) << "stat " << k;
    EXPECT_EQ(a.stats[k], b.stats[k]) << "stat " << k;
  }
  for (int n = 0; n < garbage.size(); ++n) {
    if (garbage.weight[n] == 0) {
      EXPECT_EQ(a.dlogp[n], 0.0) << "token " << n;
    }
    EXPECT_EQ(a.dlogp[n], b.dlogp[n]) << "token " << n;
  }
}

// The same with the importance weight and the entropy on, NaN/inf in both at the padding (and a
// finite ratio of e^1 there that would otherwise be the maximum): stats bit-identical to finite
// padding, dlogp and dentropy exactly 0 there, for every estimator.
TEST(GrpoTokenLoss, PaddingWithImportanceWeightAndEntropyContributesNothing) {
  for (KlEstimator e : kEstimators) {
    SCOPED_TRACE(estimator_name(e));
    const GrpoLossOptions o = asymmetric(0.05f, e, 0.01f);
    Tokens garbage = random_tokens(101, 41, o);
    add_is_weight_and_entropy(garbage, 43);
    const Tokens finite = with_finite_padding(garbage);
    const LossResult a = run_kernel(garbage, o), b = run_kernel(finite, o);
    for (int k = 0; k < kGrpoStats; ++k) {
      EXPECT_TRUE(std::isfinite(a.stats[k])) << "stat " << k;
      EXPECT_EQ(a.stats[k], b.stats[k]) << "stat " << k;
    }
    EXPECT_LT(b.stats[kGrpoRatioMax], std::exp(1.0) - 0.5);   // the padding's ratio e^1 is not counted
    int padding = 0;
    for (int n = 0; n < garbage.size(); ++n) {
      if (garbage.weight[n] == 0) {
        ++padding;
        EXPECT_EQ(a.dlogp[n], 0.0) << "token " << n;
        EXPECT_EQ(a.dentropy[n], 0.0) << "token " << n;
      }
      EXPECT_EQ(a.dlogp[n], b.dlogp[n]) << "token " << n;
      EXPECT_EQ(a.dentropy[n], b.dentropy[n]) << "token " << n;
    }
    EXPECT_GT(padding, 20);
  }
}

// N == 0: nothing written, stats untouched.
TEST(GrpoTokenLoss, NoTokens) {
  const LossResult r = run_kernel(Tokens{}, asymmetric(), {1.0, 2.0, 3.0, 4.0});
  EXPECT_EQ(r.stats, (std::array<double, kGrpoStats>{1.0, 2.0, 3.0, 4.0}));
}

}  // namespace
}  // namespace shardrl::test
