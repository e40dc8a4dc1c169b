// The GRPO token loss's test rig, shared by the test_grpo*.cpp files: the fp64 host reference of
// the loss, the kernel run on device copies of the tokens, and random tokens with NaN/inf padding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_test_util.hpp"
#include "rl/grpo.hpp"

namespace shardrl::test::grpo_test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kU = unit_roundoff<float>();
inline constexpr KlEstimator kEstimators[] = {KlEstimator::k1, KlEstimator::k2, KlEstimator::k3,
                                              KlEstimator::low_var_kl};

inline const char* estimator_name(KlEstimator e) {
  switch (e) {
    case KlEstimator::k1: return "k1";
    case KlEstimator::k2: return "k2";
    case KlEstimator::k3: return "k3";
    case KlEstimator::low_var_kl: return "low_var_kl";
  }
  return "?";
}

inline double f32(double x) { return static_cast<float>(x); }

// ----------------------------------------------------------------------------- fp64 reference

// The KL estimators at d = logp - ref_logp, from their definitions (not the kernel's expm1 form):
// k1 = d, k2 = d^2 / 2, k3 = e^-d + d - 1, low_var_kl = min(k3(clamp(d, -20, 20)), 10) with a zero
// gradient where either clamp acts. Writes d(kl)/d(logp) to dkl.
inline double reference_kl(KlEstimator e, double d, double* dkl) {
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
inline bool low_var_clamped(double d) {
  const double c = std::clamp(d, -20.0, 20.0);
  return c != d || std::exp(-c) + c - 1 > 10;
}

// The magnitude of the terms an fp32 evaluation of the estimator sums (for tolerances): k3 is
// (e^-d - 1) + d, which cancels to d^2 / 2 as d -> 0, so its error scales with |e^-d - 1|, not
// with the result.
inline double kl_terms(KlEstimator e, double d) {
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

inline TokenTerms reference_token(const Tokens& t, int n, double lp, double H, const GrpoLossOptions& o) {
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

inline TokenTerms reference_token(const Tokens& t, int n, const GrpoLossOptions& o) {
  return reference_token(t, n, t.logp[n], t.entropy.empty() ? 0.0 : t.entropy[n], o);
}

inline LossResult reference_loss(const Tokens& t, const GrpoLossOptions& o) {
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
inline LossResult run_kernel(const Tokens& t, const GrpoLossOptions& o, std::array<double, kGrpoStats> stats_in = {},
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
inline GrpoLossOptions asymmetric(float kl_coef = 0.0f, KlEstimator estimator = KlEstimator::k3,
                                  float entropy_coef = 0.0f) {
  GrpoLossOptions o;
  o.clip_low = 0.2f;    // ratio >= 0.8
  o.clip_high = 0.28f;  // ratio <= 1.28
  o.kl_coef = kl_coef;
  o.kl_estimator = estimator;
  o.entropy_coef = entropy_coef;
  return o;
}

// Random tokens: logp in [-5, 0], ratio in about [0.6, 1.65] (both sides clipped, both signs of A),
// a reference policy within +-1 nat, a third of the tokens padding (weight 0) holding NaN/inf.
// Ratios within 1e-4 of a clip bound are moved off it, so fp32 and fp64 agree on the branch
// and finite differences do not straddle the kink.
inline Tokens random_tokens(int N, std::uint64_t seed, const GrpoLossOptions& o) {
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
inline void add_is_weight_and_entropy(Tokens& t, std::uint64_t seed) {
  t.is_weight = random_values<float>(t.size(), seed, 0.2, 2.0);
  t.entropy = random_values<float>(t.size(), seed + 1, 0.0, 3.0);
  for (int n = 0; n < t.size(); ++n)
    if (t.weight[n] == 0) {
      t.is_weight[n] = (n % 2) ? kNaN : kInf;
      t.entropy[n] = (n % 2) ? kInf : kNaN;
    }
}

}  // namespace shardrl::test::grpo_test
