// The GRPO loss's KL estimators (k1, k2, k3, low_var_kl) against their fp64 definitions, value and
// gradient, at and around zero, far out and at infinite log-ratios, in the kernel and on the host.
#include <gtest/gtest.h>

#include <cfloat>
#include <string>
#include <utility>

#include "grpo_test_support.hpp"

namespace shardrl::test {
namespace {

using namespace grpo_test;

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

}  // namespace
}  // namespace shardrl::test
