// GRPO advantages and token loss. The loss kernel is compiled once, here: an extended device
// lambda in an inline function defined in several translation units is an ODR hazard under nvcc
// (see kernels/cross_entropy.cpp).
#include "rl/grpo.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace shardrl {
namespace detail {

// The four statistics of the loss, reduced in one pass (Kokkos' Sum<> reducer joins with +=).
struct GrpoSums {
  float v[kGrpoStats];

  KOKKOS_INLINE_FUNCTION GrpoSums() {
    for (int k = 0; k < kGrpoStats; ++k) v[k] = 0.0f;
  }
  KOKKOS_INLINE_FUNCTION GrpoSums& operator+=(const GrpoSums& o) {
    for (int k = 0; k < kGrpoStats; ++k) v[k] += o.v[k];
    return *this;
  }
#if KOKKOS_VERSION < 40000
  // Kokkos 3.x joins partial results through volatile references.
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile GrpoSums& o) volatile {
    for (int k = 0; k < kGrpoStats; ++k) v[k] += o.v[k];
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

std::vector<float> group_advantages(const std::vector<double>& rewards, int group_size, bool scale_by_std,
                                    double eps) {
  SHARDRL_CHECK(group_size >= 1, "group_size " + std::to_string(group_size));
  SHARDRL_CHECK(rewards.size() % static_cast<std::size_t>(group_size) == 0,
                std::to_string(rewards.size()) + " rewards do not split into groups of " + std::to_string(group_size));
  std::vector<float> advantages(rewards.size(), 0.0f);
  const std::size_t G = static_cast<std::size_t>(group_size);
  for (std::size_t begin = 0; begin < rewards.size(); begin += G) {
    const auto first = rewards.begin() + static_cast<long>(begin);
    const auto last = first + group_size;
    // Equality first: sum / G need not round back to the common value (3 * 0.1 / 3 != 0.1),
    // and such a group (G == 1 included) must give exactly 0, not roundoff over a tiny std.
    const auto [lo, hi] = std::minmax_element(first, last);
    if (*lo == *hi) continue;
    double mean = 0;
    for (auto r = first; r != last; ++r) mean += *r;
    mean /= static_cast<double>(G);
    double scale = 1.0;
    if (scale_by_std) {
      double ss = 0;
      for (auto r = first; r != last; ++r) ss += (*r - mean) * (*r - mean);
      scale = 1.0 / (std::sqrt(ss / static_cast<double>(G - 1)) + eps);
    }
    for (std::size_t i = 0; i < G; ++i)
      advantages[begin + i] = static_cast<float>((rewards[begin + i] - mean) * scale);
  }
  return advantages;
}

void grpo_token_loss(const ExecSpace& space, const float* logp, const float* old_logp, const float* ref_logp,
                     const float* advantage, const float* weight, const GrpoLossOptions& options, int N,
                     float* dlogp, float* stats) {
  const float ratio_lo = 1.0f - options.clip_low;
  const float ratio_hi = 1.0f + options.clip_high;
  const float kl_coef = options.kl_coef;
  const bool has_ref = ref_logp != nullptr;
  // One team reduces all four sums and adds them into stats itself, as masked_nll does: no device
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
                return;
              }
              const float lp = logp[n];
              const float A = advantage[n];
              const float ratio = expf(lp - old_logp[n]);
              // The clipped term is strictly the smaller one exactly in these two cases; elsewhere
              // min() picks ratio * A (ties included), whose gradient flows.
              const bool clipped = (A > 0.0f && ratio > ratio_hi) || (A < 0.0f && ratio < ratio_lo);
              const float surrogate = (clipped ? fminf(fmaxf(ratio, ratio_lo), ratio_hi) : ratio) * A;
              const float dsurrogate = clipped ? 0.0f : A * ratio;
              float kl = 0.0f, dkl = 0.0f;
              if (has_ref) {
                // k3 = e^d - d - 1 with d = ref - logp; expm1 keeps it accurate as d -> 0,
                // where e^d - 1 would cancel to roundoff.
                const float d = ref_logp[n] - lp;
                const float em1 = expm1f(d);
                kl = em1 - d;
                dkl = -em1;
              }
              const float loss = -surrogate + kl_coef * kl;
              dlogp[n] = w * (-dsurrogate + kl_coef * dkl);
              acc.v[kGrpoLoss] += w * loss;
              acc.v[kGrpoKl] += w * kl;
              acc.v[kGrpoClipped] += clipped ? w : 0.0f;
              acc.v[kGrpoWeight] += w;
            },
            Kokkos::Sum<detail::GrpoSums>(sums));
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          for (int k = 0; k < kGrpoStats; ++k) stats[k] += sums.v[k];
        });
      });
}

}  // namespace shardrl
