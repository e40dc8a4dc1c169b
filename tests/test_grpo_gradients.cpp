// The GRPO loss kernel's gradients (dlogp, and dentropy) against central finite differences of
// the fp64 loss, for every KL estimator, with the importance weight and the entropy bonus.
#include <gtest/gtest.h>

#include <string>

#include "grpo_test_support.hpp"

namespace shardrl::test {
namespace {

using namespace grpo_test;

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

}  // namespace
}  // namespace shardrl::test
