// GRPO token loss kernel against hand-computed single-token cases and an fp64 host reference
// (each KL estimator, the truncated importance weight, the entropy bonus) on random tokens whose
// padding holds NaN. The KL estimators, gradients, statistics and padding: test_grpo_*.cpp;
// advantages: tests/test_advantage.cpp.
#include <gtest/gtest.h>

#include <string>

#include "grpo_test_support.hpp"

namespace shardrl::test {
namespace {

using namespace grpo_test;

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

}  // namespace
}  // namespace shardrl::test
