// The GRPO loss kernel's statistics (by hand; sums add across calls, the ratio maximum keeps the
// larger) and its padding tokens, which contribute nothing whatever NaN or inf they hold.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "grpo_test_support.hpp"

namespace shardrl::test {
namespace {

using namespace grpo_test;

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
