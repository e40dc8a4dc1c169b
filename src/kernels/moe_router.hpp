// Mixture-of-experts routing (Qwen3-MoE style), forward and backward, in fp32: a softmax over
// the E experts' router logits per token, the top k experts (ties to the lower index), their
// gate weights (the probabilities, renormalised to sum to 1 when `renormalize`), and the
// auxiliary load-balancing loss of Hugging Face's load_balancing_loss_func:
//   L_aux = coef * E * sum_e (c_e / N) * P_e,
// c_e = tokens that picked expert e in any of their k slots, P_e = mean over tokens of p(n, e).
// The counts are treated as constants (they are not differentiable), so dL_aux/dp(n, e) =
// coef * E * c_e / N^2. Like HF's attention_mask there, `counted` (N, 1 or 0; null: all) leaves
// padding tokens out of the loss: out of N, c_e, P_e and the gradient.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

struct RouterShape {
  int N = 1;   // tokens
  int E = 1;   // experts
  int k = 1;   // experts per token
};

// probs(n, :) = softmax(logits(n, :)); expert(n, s) and gate(n, s) for the k slots, best first.
// One thread per token: E is small (tens to a few hundred) and k smaller still.
template <class T>
void router_forward(const ExecSpace& space, const RouterShape& rs, bool renormalize,
                    const T* logits,          // (N, E)
                    float* probs,             // (N, E)
                    std::int32_t* expert,     // (N, k)
                    float* gate) {            // (N, k)
  const int E = rs.E, k = rs.k;
  Kokkos::parallel_for(
      "router_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, rs.N), KOKKOS_LAMBDA(const long n) {
        const T* l = logits + n * E;
        float* p = probs + n * E;
        float mx = -INFINITY;
        for (int e = 0; e < E; ++e) mx = fmaxf(mx, static_cast<float>(l[e]));
        float sum = 0.0f;
        for (int e = 0; e < E; ++e) {
          p[e] = expf(static_cast<float>(l[e]) - mx);
          sum += p[e];
        }
        const float inv = 1.0f / sum;
        for (int e = 0; e < E; ++e) p[e] *= inv;
        // Selection: k passes, each taking the largest probability not taken yet (strictly
        // larger wins, so ties go to the lower index).
        float picked_sum = 0.0f;
        for (int s = 0; s < k; ++s) {
          int best = -1;
          for (int e = 0; e < E; ++e) {
            bool taken = false;
            for (int t = 0; t < s; ++t) taken |= expert[n * k + t] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
          }
          expert[n * k + s] = best;
          gate[n * k + s] = p[best];
          picked_sum += p[best];
        }
        if (renormalize)
          for (int s = 0; s < k; ++s) gate[n * k + s] /= picked_sum;
      });
}

// counts[e] (e < E): how many counted tokens picked expert e (in any slot); counts[E]: how many
// tokens are counted. Written, not accumulated. Integer sums in a fixed order: exact and
// deterministic.
inline void router_counts(const ExecSpace& space, const RouterShape& rs, const std::int32_t* expert,
                          const std::int32_t* counted,   // (N) or null
                          std::int32_t* counts) {        // (E + 1)
  const int N = rs.N, E = rs.E, k = rs.k;
  Kokkos::parallel_for(
      "router_counts", Kokkos::RangePolicy<ExecSpace>(space, 0, E + 1), KOKKOS_LAMBDA(const int e) {
        std::int32_t c = 0;
        for (long n = 0; n < N; ++n) {
          if (counted && !counted[n]) continue;
          if (e == E) ++c;
          else for (int s = 0; s < k; ++s) c += expert[n * k + s] == e ? 1 : 0;
        }
        counts[e] = c;
      });
}

// loss[0] = coef * E * sum_e (c_e / N) * P_e (written), P_e = the mean of probs(n, e) over the
// counted tokens (N = counts[E] of them; none: 0), summed over tokens and experts in a fixed order.
inline void router_aux_loss(const ExecSpace& space, const RouterShape& rs, float coef, const float* probs,
                            const std::int32_t* counted, const std::int32_t* counts, float* loss) {
  const int N = rs.N, E = rs.E;
  Kokkos::parallel_for(
      "router_aux_loss", Kokkos::RangePolicy<ExecSpace>(space, 0, 1), KOKKOS_LAMBDA(const int) {
        const float Nc = static_cast<float>(counts[E]);
        float total = 0.0f;
        for (int e = 0; Nc > 0.0f && e < E; ++e) {
          float P = 0.0f;
          for (int n = 0; n < N; ++n)
            if (!counted || counted[n]) P += probs[static_cast<long>(n) * E + e];
          total += static_cast<float>(counts[e]) / Nc * (P / Nc);
        }
        loss[0] = coef * E * total;
      });
}

// dlogits(n, :) from the gradient of the gate weights dgate (N, k) and the auxiliary loss
// (scaled by aux_coef; 0 leaves it out): through the renormalisation (if any), onto the picked
// probabilities, plus coef * E * c_e / N^2 on every counted token's probability, then through
// the softmax. Written, not accumulated.
template <class T>
void router_backward(const ExecSpace& space, const RouterShape& rs, bool renormalize, float aux_coef,
                     const float* probs,            // (N, E) from forward
                     const std::int32_t* expert,    // (N, k) from forward
                     const float* gate,             // (N, k) from forward
                     const std::int32_t* counted,   // (N) or null: as router_counts had it
                     const std::int32_t* counts,    // (E + 1) from router_counts (read only if aux_coef != 0)
                     const float* dgate,            // (N, k)
                     T* dlogits) {                  // (N, E)
  const int N = rs.N, E = rs.E, k = rs.k;
  Kokkos::parallel_for(
      "router_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, N), KOKKOS_LAMBDA(const long n) {
        const float* p = probs + n * E;
        // dp(e) is recomputed where it is needed (E and k are small), so no scratch row.
        const float Nc = aux_coef != 0.0f ? static_cast<float>(counts[E]) : 0.0f;
        const float aux = aux_coef != 0.0f && Nc > 0.0f && (!counted || counted[n]) ? aux_coef * E / (Nc * Nc) : 0.0f;
        // The picked probabilities' gradient: without renormalisation dgate itself; with it,
        // (dgate_s - sum_t dgate_t gate_t) / Z, Z = sum of the picked probabilities.
        float Z = 0.0f, dg_dot_g = 0.0f;
        for (int s = 0; s < k; ++s) {
          Z += p[expert[n * k + s]];
          dg_dot_g += dgate[n * k + s] * gate[n * k + s];
        }
        auto dp = [&](int e) {
          float d = aux != 0.0f ? aux * static_cast<float>(counts[e]) : 0.0f;
          for (int s = 0; s < k; ++s)
            if (expert[n * k + s] == e) d += renormalize ? (dgate[n * k + s] - dg_dot_g) / Z : dgate[n * k + s];
          return d;
        };
        float dot = 0.0f;
        for (int e = 0; e < E; ++e) dot += p[e] * dp(e);
        for (int e = 0; e < E; ++e) dlogits[n * E + e] = T(p[e] * (dp(e) - dot));
      });
}

}  // namespace shardrl::kernels
