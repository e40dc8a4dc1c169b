// The host side of the RL objective against values worked out by hand and fp64 references written
// here: the group baselines (GRPO, Dr. GRPO, RLOO), the KL folded into the reward, REINFORCE++'s
// per-token returns and their whitening from moments summed over ranks, DAPO's soft overlong
// penalty, and the sampled groups: the informative test, their wire form, dynamic sampling's
// choice, and which rank holds a prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "rl/advantage.hpp"
#include "rl/overlong.hpp"
#include "rl/sampled_group.hpp"
#include "rollout/batch_split.hpp"

namespace shardrl::test {
namespace {

constexpr double kU = 1.0 / (1 << 24);   // fp32 unit roundoff: the advantages are returned as float
constexpr double kEps = DBL_EPSILON;

void expect_floats(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

// Rewards: `groups` groups of G, each either 0/1 outcomes or continuous in [-1, 2], never all equal.
std::vector<double> random_rewards(int groups, int G, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 2.0);
  std::vector<double> r;
  for (int g = 0; g < groups; ++g) {
    const bool binary = g % 2 == 0;
    std::vector<double> group(G);
    do {
      for (double& x : group) x = binary ? static_cast<double>(gen() % 2) : u(gen);
    } while (*std::min_element(group.begin(), group.end()) == *std::max_element(group.begin(), group.end()));
    r.insert(r.end(), group.begin(), group.end());
  }
  return r;
}

// ----------------------------------------------------------------------------- GRPO, Dr. GRPO

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

// Random groups against the fp64 definition (two-pass mean and unbiased std). The result is a
// float: within 1 ulp (2u relative) of the fp64 value.
TEST(GroupAdvantages, RandomGroupsMatchReference) {
  for (int G : {2, 3, 4, 8, 16}) {
    SCOPED_TRACE("G=" + std::to_string(G));
    const std::vector<double> r = random_rewards(20, G, 100 + static_cast<std::uint64_t>(G));
    for (bool scale : {false, true}) {
      const double eps = 1e-6;
      std::vector<double> want(r.size());
      for (std::size_t b = 0; b < r.size(); b += static_cast<std::size_t>(G)) {
        double mean = 0, ss = 0;
        for (int i = 0; i < G; ++i) mean += r[b + i] / G;
        for (int i = 0; i < G; ++i) ss += (r[b + i] - mean) * (r[b + i] - mean);
        const double std_dev = std::sqrt(ss / (G - 1));
        for (int i = 0; i < G; ++i) want[b + i] = (r[b + i] - mean) / (scale ? std_dev + eps : 1.0);
      }
      const std::vector<float> got = group_advantages(r, G, scale, eps);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 2 * kU * std::fabs(want[i]) + 1e-12) << "element " << i;
    }
  }
}

// ----------------------------------------------------------------------------- RLOO

// r_i minus the mean of the group's other rewards, from the definition.
std::vector<double> reference_rloo(const std::vector<double>& r, int G) {
  std::vector<double> a(r.size(), 0.0);
  if (G == 1) return a;
  for (std::size_t b = 0; b < r.size(); b += static_cast<std::size_t>(G))
    for (int i = 0; i < G; ++i) {
      double others = 0;
      for (int j = 0; j < G; ++j)
        if (j != i) others += r[b + j];
      a[b + i] = r[b + i] - others / (G - 1);
    }
  return a;
}

TEST(RlooAdvantages, ByHand) {
  // {1, 0, 0, 1}: 1 - (0 + 0 + 1) / 3 = 2/3, 0 - (1 + 0 + 1) / 3 = -2/3.
  const double t = 2.0 / 3;
  expect_floats(rloo_advantages({1, 0, 0, 1}, 4), {t, -t, -t, t}, 2 * kU * t, "{1, 0, 0, 1}");
  // {2, 0}: 2 - 0, 0 - 2 (G/(G-1) = 2 times the centred reward).
  expect_floats(rloo_advantages({2, 0}, 2), {2, -2}, 0, "{2, 0}");
  // {3, 0, 0}: 3 - 0 = 3; 0 - 1.5 = -1.5.
  expect_floats(rloo_advantages({3, 0, 0}, 3), {3, -1.5, -1.5}, 0, "{3, 0, 0}");
  // {1, 2, 3, 6}: 1 - 11/3, 2 - 10/3, 3 - 3, 6 - 2.
  expect_floats(rloo_advantages({1, 2, 3, 6}, 4), {1 - 11.0 / 3, 2 - 10.0 / 3, 0, 4}, 2 * kU * 8.0 / 3, "{1, 2, 3, 6}");
}

TEST(RlooAdvantages, GroupOfOneAndEqualRewardsGiveExactZero) {
  for (float x : rloo_advantages({3, -2, 5, 0.25}, 1)) EXPECT_EQ(x, 0.0f);
  for (const std::vector<double>& r : {std::vector<double>{0.1, 0.1, 0.1}, std::vector<double>{0.7, 0.7, 0.7, 0.7},
                                       std::vector<double>{-3, -3}}) {
    const std::vector<float> a = rloo_advantages(r, static_cast<int>(r.size()));
    ASSERT_EQ(a.size(), r.size());
    for (float x : a) EXPECT_EQ(x, 0.0f);
  }
}

TEST(RlooAdvantages, GroupsAreIndependent) {
  // Third group {0, 0, 0, 3}: 0 - 1 = -1 three times, 3 - 0 = 3.
  const double t = 2.0 / 3;
  expect_floats(rloo_advantages({1, 0, 0, 1, /**/ 5, 5, 5, 5, /**/ 0, 0, 0, 3}, 4),
                {t, -t, -t, t, 0, 0, 0, 0, -1, -1, -1, 3}, 2 * kU * 3, "groups");
  expect_floats(rloo_advantages({0, 0, 0, 3, /**/ 1, 0, 0, 1, /**/ 5, 5, 5, 5}, 4),
                {-1, -1, -1, 3, t, -t, -t, t, 0, 0, 0, 0}, 2 * kU * 3, "swapped");
}

// Random groups against the leave-one-out definition, and the header's identity
// rloo = G / (G - 1) * (r - group mean) = G / (G - 1) * Dr. GRPO's advantage.
TEST(RlooAdvantages, RandomGroupsMatchReference) {
  for (int G : {2, 3, 4, 8, 16}) {
    SCOPED_TRACE("G=" + std::to_string(G));
    const std::vector<double> r = random_rewards(20, G, 300 + static_cast<std::uint64_t>(G));
    const std::vector<double> want = reference_rloo(r, G);
    const std::vector<float> got = rloo_advantages(r, G);
    const std::vector<float> centred = group_advantages(r, G, false, 0.0);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2 * kU * std::fabs(want[i]) + 1e-12) << "element " << i;
      // Two fp32 roundings apart (centred is a float), times G / (G - 1).
      EXPECT_NEAR(got[i], centred[i] * G / (G - 1.0), 4 * kU * std::fabs(want[i]) + 1e-12) << "element " << i;
    }
  }
}

// ----------------------------------------------------------------------------- KL in the reward, REINFORCE++

// r - kl_coef * sum_t kl_t; dyadic values are exact.
TEST(Advantage, RewardWithKlByHand) {
  EXPECT_EQ(reward_with_kl(1.0, {0.25, 0.5, -0.125}, 0.5), 1.0 - 0.5 * 0.625);   // k1 may be negative
  EXPECT_EQ(reward_with_kl(1.0, {0.25, 0.5, -0.125}, 0.0), 1.0);
  EXPECT_EQ(reward_with_kl(-0.75, {}, 0.5), -0.75);                              // no tokens
  EXPECT_NEAR(reward_with_kl(0.8, {0.1, 0.2, 0.3}, 0.05), 0.77, 4 * kEps);
}

// G_t = r - kl_coef * sum_{s >= t} kl_s, the outcome reward at every token (undiscounted).
TEST(Advantage, TokenReturnsByHand) {
  // Tails 1.75, 1.5, 1.0: 2 - 0.875, 2 - 0.75, 2 - 0.5 (dyadic: exact).
  EXPECT_EQ(token_returns(2.0, {0.25, 0.5, 1.0}, 0.5), (std::vector<double>{1.125, 1.25, 1.5}));
  // Negative KL terms (k1): tails -0.25, 0.25.
  EXPECT_EQ(token_returns(0.0, {-0.5, 0.25}, 1.0), (std::vector<double>{0.25, -0.25}));
  EXPECT_EQ(token_returns(0.5, {0.3, 0.7, 0.1, 0.9}, 0.0), (std::vector<double>(4, 0.5)));
  EXPECT_TRUE(token_returns(1.0, {}, 0.5).empty());   // a completion of no tokens
  const std::vector<double> g = token_returns(1.0, {0.1, 0.2, 0.3}, 0.1);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_NEAR(g[0], 0.94, 4 * kEps);
  EXPECT_NEAR(g[1], 0.95, 4 * kEps);
  EXPECT_NEAR(g[2], 0.97, 4 * kEps);
  // The first token's return is the whole sequence's reward with the KL folded in.
  EXPECT_NEAR(g[0], reward_with_kl(1.0, {0.1, 0.2, 0.3}, 0.1), 4 * kEps);
}

// Moments against a direct fp64 mean and unbiased variance (two passes), and whiten against
// (x - mean) / sqrt(var + 1e-8). Tolerances from the one-pass sums: the mean within n eps of
// mean |x|; the variance from sum_sq - n mean^2 within 2 (n + 2) eps sum_sq / (n - 1); whitening
// inherits both (through 1/s and 1/sqrt(var) to first order) plus a few eps.
TEST(Advantage, TokenMomentsAndWhitenMatchDirectMoments) {
  std::mt19937_64 gen(77);
  for (double offset : {0.0, 3.0})
    for (int n : {2, 3, 17, 500}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset " + std::to_string(offset));
      std::uniform_real_distribution<double> u(-2.0 + offset, 1.0 + offset);
      std::vector<double> x(n);
      for (double& v : x) v = u(gen);
      TokenMoments m;
      for (double v : x) m.add(v);
      double mean = 0, abs_sum = 0, sum_sq = 0;
      for (double v : x) {
        mean += v / n;
        abs_sum += std::fabs(v);
        sum_sq += v * v;
      }
      double var = 0;
      for (double v : x) var += (v - mean) * (v - mean) / (n - 1);
      EXPECT_EQ(m.count, n);
      const double mean_tol = (n + 2) * kEps * abs_sum / n;
      const double var_tol = 2 * (n + 2) * kEps * sum_sq / (n - 1);
      EXPECT_NEAR(m.mean(), mean, mean_tol);
      EXPECT_NEAR(m.variance(), var, var_tol);
      const double s = std::sqrt(var + 1e-8);
      for (double v : x) {
        const double w = (v - mean) / s;
        EXPECT_NEAR(whiten(v, m), w, std::fabs(w) * var_tol / (2 * s * s) + mean_tol / s + 4 * kEps * std::fabs(w));
      }
      // Whitened values have mean 0 and unbiased variance var / (var + 1e-8).
      TokenMoments wm;
      for (double v : x) wm.add(whiten(v, m));
      EXPECT_NEAR(wm.mean(), 0.0, 2 * mean_tol / s + 1e-12);
      EXPECT_NEAR(wm.variance(), var / (var + 1e-8), 4 * var_tol / (var + 1e-8) + 1e-12);
    }
}

TEST(Advantage, TokenMomentsOfFewerThanTwoValues) {
  TokenMoments none;
  EXPECT_EQ(none.mean(), 0.0);
  EXPECT_EQ(none.variance(), 0.0);
  TokenMoments one;
  one.add(2.5);
  EXPECT_EQ(one.mean(), 2.5);
  EXPECT_EQ(one.variance(), 0.0);
  EXPECT_EQ(whiten(2.5, one), 0.0);
  EXPECT_NEAR(whiten(3.5, one), 1.0 / std::sqrt(1e-8), 1e-12 / std::sqrt(1e-8));   // 1 / sqrt(var + 1e-8)
}

// The moments of one global batch from its parts, summed field by field as the ranks sum them
// (a rank with no tokens included): the same whitening as from one part. Dyadic values (all
// sums exact): bit-identical; random values: to the roundoff of the sums.
TEST(Advantage, MomentsSummedOverRanksWhitenAsOnePart) {
  auto summed = [](const std::vector<double>& x, const std::vector<std::size_t>& cuts) {
    std::vector<TokenMoments> parts(cuts.size() + 1);
    for (std::size_t i = 0, p = 0; i < x.size(); ++i) {
      while (p < cuts.size() && i >= cuts[p]) ++p;
      parts[p].add(x[i]);
    }
    TokenMoments total;
    for (const TokenMoments& p : parts) {
      total.count += p.count;
      total.sum += p.sum;
      total.sum_sq += p.sum_sq;
    }
    return total;
  };
  std::mt19937_64 gen(99);
  std::vector<double> dyadic(300), random(300);
  for (double& v : dyadic) v = static_cast<double>(static_cast<int>(gen() % 129) - 64) / 16;   // [-4, 4] by 1/16
  std::uniform_real_distribution<double> u(-2.0, 3.0);
  for (double& v : random) v = u(gen);
  for (const std::vector<std::size_t>& cuts :
       {std::vector<std::size_t>{150}, std::vector<std::size_t>{1, 100, 100, 299}, std::vector<std::size_t>{0, 0}}) {
    SCOPED_TRACE("parts from " + std::to_string(cuts.size() + 1) + " ranks");
    TokenMoments one;
    for (double v : dyadic) one.add(v);
    const TokenMoments ranks = summed(dyadic, cuts);
    EXPECT_EQ(ranks.count, one.count);
    EXPECT_EQ(ranks.sum, one.sum);
    EXPECT_EQ(ranks.sum_sq, one.sum_sq);
    for (double v : dyadic) EXPECT_EQ(whiten(v, ranks), whiten(v, one));

    TokenMoments one_r;
    for (double v : random) one_r.add(v);
    const TokenMoments ranks_r = summed(random, cuts);
    EXPECT_EQ(ranks_r.count, one_r.count);
    for (double v : random) EXPECT_NEAR(whiten(v, ranks_r), whiten(v, one_r), 1e-12 * (1 + std::fabs(whiten(v, one_r))));
  }
}

// ----------------------------------------------------------------------------- overlong penalty

// 0 up to max_new_tokens - buffer, then -(length - (max - buffer)) / buffer, -1 at max_new_tokens.
TEST(OverlongPenalty, ByHand) {
  // No buffer: never a penalty.
  for (int length : {0, 50, 99, 100}) EXPECT_EQ(overlong_penalty(length, 100, 0), 0.0) << length;
  EXPECT_EQ(overlong_penalty(100, 100, -5), 0.0);
  // max 100, buffer 20: free up to 80.
  for (int length : {0, 1, 40, 79, 80}) EXPECT_EQ(overlong_penalty(length, 100, 20), 0.0) << length;
  EXPECT_DOUBLE_EQ(overlong_penalty(81, 100, 20), -0.05);
  EXPECT_DOUBLE_EQ(overlong_penalty(85, 100, 20), -0.25);
  EXPECT_DOUBLE_EQ(overlong_penalty(90, 100, 20), -0.5);
  EXPECT_DOUBLE_EQ(overlong_penalty(99, 100, 20), -0.95);
  EXPECT_EQ(overlong_penalty(100, 100, 20), -1.0);
  // Linear inside the buffer: equal steps of -1/20.
  for (int length = 81; length <= 100; ++length)
    EXPECT_NEAR(overlong_penalty(length, 100, 20) - overlong_penalty(length - 1, 100, 20), -0.05, 4 * kEps) << length;
  // The whole completion budget as the buffer: linear from 0 tokens.
  EXPECT_EQ(overlong_penalty(0, 8, 8), 0.0);
  EXPECT_EQ(overlong_penalty(2, 8, 8), -0.25);
  EXPECT_EQ(overlong_penalty(8, 8, 8), -1.0);
  // Buffer of one token: only a completion at max_new_tokens.
  EXPECT_EQ(overlong_penalty(15, 16, 1), 0.0);
  EXPECT_EQ(overlong_penalty(16, 16, 1), -1.0);
  // Never below -1.
  EXPECT_EQ(overlong_penalty(120, 100, 20), -1.0);
}

// ----------------------------------------------------------------------------- sampled groups

SampledGroup group_with_rewards(std::vector<double> rewards) {
  SampledGroup g;
  g.rewards = g.scores = std::move(rewards);
  g.completions.resize(g.rewards.size());
  return g;
}

TEST(SampledGroup, InformativeWhenTheTasksRewardsDiffer) {
  EXPECT_FALSE(group_with_rewards({}).informative());
  EXPECT_FALSE(group_with_rewards({1.0}).informative());
  EXPECT_FALSE(group_with_rewards({0.5, 0.5, 0.5}).informative());
  EXPECT_FALSE(group_with_rewards({0.0, 0.0, 0.0, 0.0}).informative());
  EXPECT_TRUE(group_with_rewards({0.0, 1.0}).informative());
  EXPECT_TRUE(group_with_rewards({1.0, 1.0, 1.0, 0.0}).informative());
  EXPECT_TRUE(group_with_rewards({0.25, 0.0, 0.25}).informative());   // graded rewards
  // All right, but two of them too long (rl.overlong = "soft"): a length signal only, which the
  // group normalisation scaled to advantages of about +-1. DAPO filters on accuracy.
  SampledGroup lengths = group_with_rewards({1.0, 1.0, 1.0});
  lengths.rewards = {0.75, 1.0, 0.5};
  EXPECT_FALSE(lengths.informative());
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
std::uint64_t bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

Completion completion(std::vector<std::int32_t> tokens, std::vector<float> logp, bool finished) {
  Completion c;
  c.tokens = std::move(tokens);
  c.logp = std::move(logp);
  c.entropy.assign(c.tokens.size(), 1.5f);   // does not travel
  c.finished = finished;
  return c;
}

// Several groups (an empty completion, an empty prompt, large slot and prompt numbers, logp values
// that only survive a bit-exact copy: -0, a subnormal, -inf, a NaN payload, the largest float),
// back as they were except the entropies.
TEST(SampledGroup, SerializeRoundTripIsBitExact) {
  std::vector<std::pair<std::int64_t, SampledGroup>> groups(3);
  float payload_nan;
  const std::uint32_t nan_bits = 0x7fc12345u;
  std::memcpy(&payload_nan, &nan_bits, sizeof payload_nan);
  groups[0].first = 5;
  groups[0].second.prompt_index = 12;
  groups[0].second.prompt = {1, 2, 3};
  groups[0].second.completions = {completion({7, 8, 9}, {-0.5f, -1e-40f, -0.0f}, true), completion({}, {}, false)};
  groups[0].second.rewards = {1.0, 0.1};
  groups[1].first = 0;
  groups[1].second.prompt_index = 3;
  groups[1].second.prompt = {};
  groups[1].second.completions = {completion({-1, 2147483647}, {-std::numeric_limits<float>::infinity(), payload_nan}, false),
                                  completion({0}, {-std::numeric_limits<float>::max()}, true),
                                  completion({42, 43, 44, 45}, {-1.0f / 3, -2.0f / 3, -1e-7f, -20.0f}, true)};
  groups[1].second.rewards = {-0.0, 1.0 / 3, -1.5};
  groups[1].second.scores = {0.0, 1.0 / 3, -0.5};
  groups[2].first = std::int64_t{1} << 40;
  groups[2].second.prompt_index = (std::int64_t{1} << 35) + 7;
  groups[2].second.prompt = std::vector<std::int32_t>(1000, 17);
  groups[2].second.completions = {completion({}, {}, true)};
  groups[2].second.rewards = {0.5};

  const std::vector<std::pair<std::int64_t, SampledGroup>> back = deserialize_groups(serialize_groups(groups));
  ASSERT_EQ(back.size(), groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    SCOPED_TRACE("group " + std::to_string(i));
    const SampledGroup &a = groups[i].second, &b = back[i].second;
    EXPECT_EQ(back[i].first, groups[i].first);
    EXPECT_EQ(b.prompt_index, a.prompt_index);
    EXPECT_EQ(b.prompt, a.prompt);
    ASSERT_EQ(b.rewards.size(), a.rewards.size());
    for (std::size_t r = 0; r < a.rewards.size(); ++r) EXPECT_EQ(bits(b.rewards[r]), bits(a.rewards[r])) << "reward " << r;
    EXPECT_EQ(b.scores, a.scores);
    ASSERT_EQ(b.completions.size(), a.completions.size());
    for (std::size_t c = 0; c < a.completions.size(); ++c) {
      SCOPED_TRACE("completion " + std::to_string(c));
      EXPECT_EQ(b.completions[c].tokens, a.completions[c].tokens);
      EXPECT_EQ(b.completions[c].finished, a.completions[c].finished);
      ASSERT_EQ(b.completions[c].logp.size(), a.completions[c].logp.size());
      for (std::size_t t = 0; t < a.completions[c].logp.size(); ++t)
        EXPECT_EQ(bits(b.completions[c].logp[t]), bits(a.completions[c].logp[t])) << "logp " << t;
      EXPECT_TRUE(b.completions[c].entropy.empty());
    }
  }
  EXPECT_TRUE(deserialize_groups(serialize_groups({})).empty());
}

TEST(SampledGroup, EmptyMessageGivesNoGroups) { EXPECT_TRUE(deserialize_groups(std::string()).empty()); }

// ----------------------------------------------------------------------------- dynamic sampling

std::vector<std::int64_t> ids(std::initializer_list<std::int64_t> v) { return v; }

TEST(SelectGroups, ByHand) {
  const std::vector<char> inf = {0, 1, 0, 1, 1, 0};
  EXPECT_EQ(select_groups(inf, 0), ids({}));
  EXPECT_EQ(select_groups(inf, 1), ids({1}));
  EXPECT_EQ(select_groups(inf, 2), ids({1, 3}));
  EXPECT_EQ(select_groups(inf, 3), ids({1, 3, 4}));
  // Short of informative groups: all of them, then the earliest uninformative ones, in draw order.
  EXPECT_EQ(select_groups(inf, 4), ids({0, 1, 3, 4}));
  EXPECT_EQ(select_groups(inf, 5), ids({0, 1, 2, 3, 4}));
  EXPECT_EQ(select_groups(inf, 6), ids({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(select_groups({0, 0, 0, 0}, 2), ids({0, 1}));
  EXPECT_EQ(select_groups({1, 1, 1, 1, 1}, 3), ids({0, 1, 2}));
  EXPECT_EQ(select_groups({0, 0, 0, 1}, 2), ids({0, 3}));
  EXPECT_EQ(select_groups({0, 0, 1, 0, 1, 1}, 2), ids({2, 4}));   // later rounds' informative groups beat earlier uninformative ones
}

// On random flags: exactly `needed` indices, strictly increasing, as many informative ones as
// there are (up to needed) and those the earliest, the rest the earliest uninformative ones.
TEST(SelectGroups, RandomFlags) {
  std::mt19937_64 gen(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(gen() % 40);
    std::vector<char> inf(n);
    const int density = static_cast<int>(gen() % 5);   // 0: none informative ... 4: most
    for (char& f : inf) f = static_cast<char>(static_cast<int>(gen() % 4) < density);
    const std::int64_t needed = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(n + 1));
    SCOPED_TRACE("trial " + std::to_string(trial) + ", n " + std::to_string(n) + ", needed " + std::to_string(needed));
    const std::vector<std::int64_t> got = select_groups(inf, needed);
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), needed);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i] >= 0 && got[i] < n);
      if (i > 0) {
        ASSERT_LT(got[i - 1], got[i]);
      }
    }
    std::vector<std::int64_t> informative, uninformative;
    for (int i = 0; i < n; ++i) (inf[i] ? informative : uninformative).push_back(i);
    const std::int64_t want_inf = std::min<std::int64_t>(needed, static_cast<std::int64_t>(informative.size()));
    std::vector<std::int64_t> want(informative.begin(), informative.begin() + want_inf);
    want.insert(want.end(), uninformative.begin(), uninformative.begin() + (needed - want_inf));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
  }
}

// ----------------------------------------------------------------------------- prompts and ranks

// rank_of_prompt inverts prompts_of_rank: the blocks tile [0, prompts) in rank order, sizes base
// or base + 1 (the first prompts % ranks ranks the larger), and every prompt maps to the rank
// whose block holds it, including more ranks than prompts (empty blocks).
TEST(RankOfPrompt, InvertsPromptsOfRank) {
  for (std::int64_t P = 1; P <= 20; ++P)
    for (int R = 1; R <= 8; ++R) {
      SCOPED_TRACE("prompts " + std::to_string(P) + ", ranks " + std::to_string(R));
      std::int64_t next = 0;
      for (int r = 0; r < R; ++r) {
        const auto [begin, end] = prompts_of_rank(P, R, r);
        ASSERT_EQ(begin, next) << "rank " << r;
        ASSERT_EQ(end - begin, P / R + (r < P % R ? 1 : 0)) << "rank " << r;
        for (std::int64_t p = begin; p < end; ++p) EXPECT_EQ(rank_of_prompt(p, P, R), r) << "prompt " << p;
        next = end;
      }
      ASSERT_EQ(next, P);
    }
}

}  // namespace
}  // namespace shardrl::test
