// GRPO math: group advantages on hand-computed groups; the token loss kernel against hand-computed
// single-token cases and an fp64 host reference, its gradient against central finite differences
// of the fp64 loss, padding that holds NaN, and accumulation of the statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "rl/grpo.hpp"

namespace shardrl::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU = unit_roundoff<float>();

void expect_floats(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

// ----------------------------------------------------------------------------- advantages

TEST(GroupAdvantages, OneGroupByHand) {
  const std::vector<double> rewards = {1, 0, 0, 1};
  // mean 0.5; unbiased std sqrt((4 * 0.25) / 3) = 0.5773502691896258 (the biased one, 0.5, would give 1.0).
  expect_floats(group_advantages(rewards, 4, false, 1e-6), {0.5, -0.5, -0.5, 0.5}, 0, "centred only");
  const double a0 = 0.8660254037844387;   // 0.5 / 0.5773502691896258
  const double a6 = 0.8660239037870368;   // 0.5 / (0.5773502691896258 + 1e-6)
  const double a1 = 0.7381705193654007;   // 0.5 / (0.5773502691896258 + 0.1): eps outside the sqrt
  expect_floats(group_advantages(rewards, 4, true, 0.0), {a0, -a0, -a0, a0}, 2 * kU, "std, eps 0");
  expect_floats(group_advantages(rewards, 4, true, 1e-6), {a6, -a6, -a6, a6}, 2 * kU, "std, eps 1e-6");
  expect_floats(group_advantages(rewards, 4, true, 0.1), {a1, -a1, -a1, a1}, 2 * kU, "std, eps 0.1");
  // G = 2: {2, 0} -> mean 1, std sqrt(2).
  expect_floats(group_advantages({2, 0}, 2, true, 0.0), {0.7071067811865475, -0.7071067811865475}, 2 * kU, "G=2");
}

// All-equal rewards carry no signal: exactly 0, also where sum / G does not round back to the
// common value (3 * 0.1 / 3 != 0.1 in binary) and with eps = 0 (std 0: no division by it).
TEST(GroupAdvantages, EqualRewardsGiveExactZero) {
  for (bool scale : {false, true})
    for (double eps : {0.0, 1e-6}) {
      SCOPED_TRACE(std::string("scale_by_std ") + (scale ? "on" : "off") + ", eps " + std::to_string(eps));
      for (const std::vector<double>& r : {std::vector<double>{0.1, 0.1, 0.1}, std::vector<double>{0.7, 0.7, 0.7, 0.7},
                                           std::vector<double>{-3, -3}}) {
        const std::vector<float> a = group_advantages(r, static_cast<int>(r.size()), scale, eps);
        for (float x : a) EXPECT_EQ(x, 0.0f);
      }
    }
}

TEST(GroupAdvantages, GroupOfOneGivesZero) {
  for (bool scale : {false, true}) {
    const std::vector<float> a = group_advantages({3, -2, 5, 0.25}, 1, scale, 1e-6);
    ASSERT_EQ(a.size(), 4u);
    for (float x : a) EXPECT_EQ(x, 0.0f);
  }
}

// Each group is normalised by its own statistics only.
TEST(GroupAdvantages, GroupsAreIndependent) {
  const std::vector<double> rewards = {1, 0, 0, 1, /**/ 5, 5, 5, 5, /**/ 0, 0, 0, 3};
  // Third group: mean 0.75, deviations {-0.75 x3, 2.25}, unbiased variance 6.75 / 3 = 2.25, std 1.5.
  const double a0 = 0.8660254037844387;
  expect_floats(group_advantages(rewards, 4, true, 0.0), {a0, -a0, -a0, a0, 0, 0, 0, 0, -0.5, -0.5, -0.5, 1.5},
                2 * kU, "std");
  expect_floats(group_advantages(rewards, 4, false, 0.0),
                {0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, -0.75, -0.75, -0.75, 2.25}, 0, "centred");
  // The same groups in another order give the same advantages, moved with them.
  const std::vector<double> swapped = {0, 0, 0, 3, /**/ 1, 0, 0, 1, /**/ 5, 5, 5, 5};
  expect_floats(group_advantages(swapped, 4, true, 0.0), {-0.5, -0.5, -0.5, 1.5, a0, -a0, -a0, a0, 0, 0, 0, 0},
                2 * kU, "swapped");
}

// ----------------------------------------------------------------------------- token loss

struct Tokens {
  std::vector<double> logp, old_logp, ref_logp, advantage, weight;  // ref_logp empty: no KL
  int size() const { return static_cast<int>(logp.size()); }
};

struct LossResult {
  std::vector<double> dlogp;
  std::array<double, kGrpoStats> stats{};
};

// Token n's loss in fp64, straight from the definition (min of the two terms, k3 as written).
double reference_token_loss(const Tokens& t, int n, double lp, const GrpoLossOptions& o, double* kl_out = nullptr,
                            bool* clipped_out = nullptr, double* grad_out = nullptr) {
  const double A = t.advantage[n];
  const double lo = 1.0 - static_cast<double>(o.clip_low), hi = 1.0 + static_cast<double>(o.clip_high);
  const double ratio = std::exp(lp - t.old_logp[n]);
  const double unclipped = ratio * A, clipped = std::clamp(ratio, lo, hi) * A;
  const double surrogate = std::min(unclipped, clipped);
  double kl = 0, dkl = 0;
  if (!t.ref_logp.empty()) {
    const double d = t.ref_logp[n] - lp;
    kl = std::exp(d) - d - 1;
    dkl = 1 - std::exp(d);
  }
  if (kl_out) *kl_out = kl;
  if (clipped_out) *clipped_out = clipped < unclipped;
  if (grad_out) *grad_out = (unclipped <= clipped ? -A * ratio : 0.0) + static_cast<double>(o.kl_coef) * dkl;
  return -surrogate + static_cast<double>(o.kl_coef) * kl;
}

LossResult reference_loss(const Tokens& t, const GrpoLossOptions& o) {
  LossResult r;
  r.dlogp.assign(t.logp.size(), 0.0);
  for (int n = 0; n < t.size(); ++n) {
    const double w = t.weight[n];
    if (w == 0) continue;
    double kl = 0, grad = 0;
    bool clipped = false;
    const double loss = reference_token_loss(t, n, t.logp[n], o, &kl, &clipped, &grad);
    r.dlogp[n] = w * grad;
    r.stats[kGrpoLoss] += w * loss;
    r.stats[kGrpoKl] += w * kl;
    r.stats[kGrpoClipped] += clipped ? w : 0.0;
    r.stats[kGrpoWeight] += w;
  }
  return r;
}

// The kernel on device copies of t. dlogp is poisoned and has guard elements past N, so an
// unwritten or out-of-range element shows. stats_in is what stats holds before the call;
// `calls` > 1 runs the kernel again on the same buffers.
LossResult run_kernel(const Tokens& t, const GrpoLossOptions& o, std::array<double, kGrpoStats> stats_in = {},
                      int calls = 1) {
  const int N = t.size();
  Buffer<float> logp(N), old_logp(N), ref_logp(std::max(N, 1)), advantage(N), weight(N), dlogp(N + kGuard),
      stats(kGrpoStats);
  logp.set(t.logp);
  old_logp.set(t.old_logp);
  if (!t.ref_logp.empty()) ref_logp.set(t.ref_logp);
  advantage.set(t.advantage);
  weight.set(t.weight);
  dlogp.poison();
  stats.set(std::vector<double>(stats_in.begin(), stats_in.end()));
  for (int c = 0; c < calls; ++c)
    grpo_token_loss(ExecSpace(), logp.data(), old_logp.data(), t.ref_logp.empty() ? nullptr : ref_logp.data(),
                    advantage.data(), weight.data(), o, N, dlogp.data(), stats.data());
  LossResult r;
  r.dlogp = dlogp.host();
  expect_guard_untouched(r.dlogp, N, "dlogp");
  r.dlogp.resize(N);
  const std::vector<double> s = stats.host();
  std::copy(s.begin(), s.end(), r.stats.begin());
  return r;
}

// Asymmetric clipping (as in DAPO) so that a swap of the two bounds shows.
GrpoLossOptions asymmetric(float kl_coef = 0.0f) {
  GrpoLossOptions o;
  o.clip_low = 0.2f;    // ratio >= 0.8
  o.clip_high = 0.28f;  // ratio <= 1.28
  o.kl_coef = kl_coef;
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
      // KL: d = ref - logp = -0.5: k3 = e^-0.5 + 0.5 - 1 = 0.10653065971263342, dk3/dlogp = 1 - e^-0.5.
      // A = 0 leaves only the KL term; kl_coef 0.1 scales loss and gradient, not the KL statistic.
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
    Tokens t{{c.logp}, {c.old_logp}, {}, {c.advantage}, {c.weight}};
    if (!std::isnan(c.ref_logp) || c.weight == 0) t.ref_logp = {c.ref_logp};
    const LossResult r = run_kernel(t, asymmetric(c.kl_coef));
    // Inputs are rounded to fp32 (e.g. -0.8), then exp and a few operations: a few u relative.
    const double tol = 8 * kU;
    expect_close(r.dlogp, {c.dlogp}, tol, tol, "dlogp");
    expect_close({r.stats[kGrpoLoss]}, {c.loss}, tol, tol, "loss");
    // k3 = expm1(d) - d loses |d| / k3 ~ 5x to cancellation here.
    expect_close({r.stats[kGrpoKl]}, {c.kl}, 5 * tol, tol, "kl");
    EXPECT_EQ(r.stats[kGrpoClipped], c.clipped);
    EXPECT_EQ(r.stats[kGrpoWeight], c.weight);
    if (c.weight == 0) {
      EXPECT_EQ(r.dlogp[0], 0.0);
      for (double s : r.stats) EXPECT_EQ(s, 0.0);
    }
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

// fp32 kernel vs fp64 reference. Per token: exp of an fp32 difference and a few operations,
// a few u of the largest term (|A| ratio <= 3.3, kl_coef e^d <= 0.3). Sums of N terms: at most
// ~N u of the sum of magnitudes (a sequential fp32 sum; a tree does better).
void check_against_reference(const Tokens& t, const GrpoLossOptions& o) {
  const LossResult want = reference_loss(t, o);
  const LossResult got = run_kernel(t, o);
  expect_close(got.dlogp, want.dlogp, 8 * kU, 8 * kU * 4, "dlogp");
  for (int n = 0; n < t.size(); ++n)
    if (t.weight[n] == 0) {
      ASSERT_EQ(got.dlogp[n], 0.0) << "padding token " << n;
    }
  std::array<double, kGrpoStats> size{};
  for (int n = 0; n < t.size(); ++n) {
    if (t.weight[n] == 0) continue;
    double kl = 0;
    const double loss = reference_token_loss(t, n, t.logp[n], o, &kl);
    size[kGrpoLoss] += std::fabs(t.weight[n] * loss);
    size[kGrpoKl] += std::fabs(t.weight[n] * kl);
    size[kGrpoClipped] += t.weight[n];
    size[kGrpoWeight] += t.weight[n];
  }
  const char* names[kGrpoStats] = {"loss", "kl", "clipped", "weight"};
  for (int k = 0; k < kGrpoStats; ++k) {
    const double tol = (2.0 * t.size() + 8) * kU * size[k] + 4 * kU;
    expect_close({got.stats[k]}, {want.stats[k]}, 0, tol, names[k]);
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
        if (t.weight[n] != 0) L += t.weight[n] * reference_token_loss(t, n, n == m ? lp_m : t.logp[n], o);
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

// stats accumulate into what they hold; dlogp is overwritten, not accumulated. Two calls from
// zero give exactly twice one call (s + s is exact); from a non-zero start, start + 2 s.
TEST(GrpoTokenLoss, StatsAccumulate) {
  const GrpoLossOptions o = asymmetric(0.05f);
  const Tokens t = random_tokens(257, 77, o);
  const LossResult once = run_kernel(t, o);
  const LossResult twice = run_kernel(t, o, {}, 2);
  for (int k = 0; k < kGrpoStats; ++k) {
    EXPECT_NE(once.stats[k], 0.0) << "stat " << k;
    EXPECT_EQ(twice.stats[k], 2 * once.stats[k]) << "stat " << k;
  }
  EXPECT_EQ(twice.dlogp, once.dlogp);

  const std::array<double, kGrpoStats> start = {3.25, -1.5, 7.0, 100.0};
  const LossResult from_start = run_kernel(t, o, start, 2);
  for (int k = 0; k < kGrpoStats; ++k)
    EXPECT_NEAR(from_start.stats[k], start[k] + 2 * once.stats[k],
                4 * kU * (std::fabs(start[k]) + 2 * std::fabs(once.stats[k])))
        << "stat " << k;
}

// Padding contributes nothing whatever it holds: the same tokens with finite padding values and
// with NaN/inf padding give bit-identical stats, and dlogp exactly 0 there.
TEST(GrpoTokenLoss, PaddingContributesNothing) {
  const GrpoLossOptions o = asymmetric(0.05f);
  const Tokens garbage = random_tokens(101, 31, o);
  Tokens finite = garbage;
  for (int n = 0; n < finite.size(); ++n)
    if (finite.weight[n] == 0) {
      finite.logp[n] = -1.0;
      finite.old_logp[n] = -2.0;
      finite.ref_logp[n] = -1.0;
      finite.advantage[n] = 1.0;
    }
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

// N == 0: nothing written, stats untouched.
TEST(GrpoTokenLoss, NoTokens) {
  const LossResult r = run_kernel(Tokens{}, asymmetric(), {1.0, 2.0, 3.0, 4.0});
  EXPECT_EQ(r.stats, (std::array<double, kGrpoStats>{1.0, 2.0, 3.0, 4.0}));
}

}  // namespace
}  // namespace shardrl::test
