// The policy-gradient token loss. The kernel is compiled once, here: an extended device
// lambda in an inline function defined in several translation units is an ODR hazard under nvcc
// (see kernels/cross_entropy.cpp).
#include "rl/grpo.hpp"


namespace shardrl {
namespace detail {

// The statistics of the loss, reduced in one pass. Kokkos' Sum<> reducer joins with +=, which
// here adds the sums and keeps the larger kGrpoRatioMax (its identity, 0, is below any ratio).
struct GrpoSums {
  float v[kGrpoStats];

  KOKKOS_INLINE_FUNCTION GrpoSums() {
    for (int k = 0; k < kGrpoStats; ++k) v[k] = 0.0f;
  }
  KOKKOS_INLINE_FUNCTION GrpoSums& operator+=(const GrpoSums& o) {
    for (int k = 0; k < kGrpoStats; ++k) v[k] = k == kGrpoRatioMax ? fmaxf(v[k], o.v[k]) : v[k] + o.v[k];
    return *this;
  }
#if KOKKOS_VERSION < 40000
  // Kokkos 3.x joins partial results through volatile references.
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile GrpoSums& o) volatile {
    for (int k = 0; k < kGrpoStats; ++k) v[k] = k == kGrpoRatioMax ? fmaxf(v[k], o.v[k]) : v[k] + o.v[k];
  }
#endif
};

}  // namespace detail
}  // namespace shardrl

namespace Kokkos {
template <>
struct reduction_identity<shardrl::detail::GrpoSums> {
  KOKKOS_FORCEINLINE_FUNCTION static shardrl::detail::GrpoSums sum() { return shardrl::detail::GrpoSums(); }
};
}  // namespace Kokkos

namespace shardrl {

void grpo_token_loss(const ExecSpace& space, const float* logp, const float* old_logp, const float* ref_logp,
                     const float* advantage, const float* weight, const float* is_weight, const float* entropy,
                     const GrpoLossOptions& options, int N, float* dlogp, float* dentropy, float* stats) {
  const float ratio_lo = 1.0f - options.clip_low;
  const float ratio_hi = 1.0f + options.clip_high;
  const float kl_coef = options.kl_coef;
  const float entropy_coef = options.entropy_coef;
  const KlEstimator estimator = options.kl_estimator;
  // One team reduces all the sums and adds them into stats itself, as masked_nll does: no device
  // scratch to allocate, no host round trip, and a fixed summation order for a given team size.
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "grpo_token_loss", Policy(space, 1, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        detail::GrpoSums sums;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, N),
            [&](const int n, detail::GrpoSums& acc) {
              const float w = weight[n];
              // Padding may hold NaN or inf: skip it before touching its log-probs.
              if (w == 0.0f) {
                dlogp[n] = 0.0f;
                if (entropy != nullptr) dentropy[n] = 0.0f;
                return;
              }
              const float lp = logp[n];
              const float A = advantage[n];
              const float c = is_weight != nullptr ? is_weight[n] : 1.0f;
              const float ratio = expf(lp - old_logp[n]);
              // The clipped term is strictly the smaller one exactly in these two cases; elsewhere
              // min() picks ratio * A (ties included), whose gradient flows.
              const bool clipped = (A > 0.0f && ratio > ratio_hi) || (A < 0.0f && ratio < ratio_lo);
              const float surrogate = (clipped ? fminf(fmaxf(ratio, ratio_lo), ratio_hi) : ratio) * A;
              const float dsurrogate = clipped ? 0.0f : A * ratio;
              float kl = 0.0f, dkl = 0.0f;
              if (ref_logp != nullptr) kl_estimate(estimator, lp - ref_logp[n], kl, dkl);
              const float H = entropy != nullptr ? entropy[n] : 0.0f;
              const float loss = -c * surrogate + kl_coef * kl - entropy_coef * H;
              dlogp[n] = w * (-c * dsurrogate + kl_coef * dkl);
              if (entropy != nullptr) dentropy[n] = -w * entropy_coef;
              acc.v[kGrpoLoss] += w * loss;
              acc.v[kGrpoKl] += w * kl;
              acc.v[kGrpoClipped] += clipped ? w : 0.0f;
              acc.v[kGrpoWeight] += w;
              acc.v[kGrpoRatioSum] += ratio;
              acc.v[kGrpoTokens] += 1.0f;
              acc.v[kGrpoRatioMax] = fmaxf(acc.v[kGrpoRatioMax], ratio);
            },
            Kokkos::Sum<detail::GrpoSums>(sums));
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          for (int k = 0; k < kGrpoStats; ++k)
            stats[k] = k == kGrpoRatioMax ? fmaxf(stats[k], sums.v[k]) : stats[k] + sums.v[k];
        });
      });
}

}  // namespace shardrl
