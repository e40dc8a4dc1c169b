// Token log-probabilities from logits (the LM head's output) under the distribution at
// temperature T, in fp32:
//   z(n, v) = logits(n, v) / T,  lse(n) = logsumexp_v z(n, v),  logp(n) = z(n, target(n)) - lse(n),
//   entropy(n) = -sum_v p(n, v) log p(n, v)  with p = softmax(z(n, :))      (optional)
// Cross-entropy is -logp at T = 1; RL losses are functions of logp (and of the entropy), at the
// temperature the rollout sampled with, so the importance ratio compares the policy that sampled.
// Backward takes dL/dlogp (and dL/dentropy) per token, zero where nothing is trained, and returns
// dL/dlogits, which may overwrite the logits (the head keeps one buffer for both).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/packed.hpp"

namespace shardrl::kernels {

template <class T>
void token_logprob_forward(const ExecSpace& space,
                           const T* logits,                // (N, V)
                           const std::int32_t* targets,    // (N); negative: not scored, logp and entropy 0
                           float temperature,              // > 0
                           float* logp,                    // (N)
                           float* lse,                     // (N) of z; saved for backward
                           float* entropy,                 // (N), or nullptr: not computed
                           int N, int V);

// With log p(n, v) = z(n, v) - lse(n) and H(n) = entropy(n):
//   dlogits(n, v) = (1/T) * ( dlogp(n) * (1[v == target(n)] - p(n, v))
//                             - dentropy(n) * p(n, v) * (log p(n, v) + H(n)) )         (written)
// `entropy` and `dentropy` are both given (the forward's entropy) or both nullptr (no entropy term).
template <class T>
void token_logprob_backward(const ExecSpace& space,
                            const T* logits,                // (N, V)
                            const std::int32_t* targets,    // (N); negative: no v is the target
                            float temperature,
                            const float* lse,               // (N)
                            const float* dlogp,             // (N)
                            const float* entropy,           // (N), or nullptr
                            const float* dentropy,          // (N), or nullptr
                            T* dlogits,                     // (N, V)
                            int N, int V);

// Scaled masked negative log-likelihood, reduced on the device (no host synchronisation):
//   *loss += -scale * sum_n mask(n) * logp(n)       (accumulates into one float)
//   dlogp(n) = -scale * mask(n)                     (written)
// The caller picks scale, e.g. 1 / (tokens in the whole batch across micro-batches and ranks),
// so that sharded and unsharded runs compute the same mean.
void masked_nll(const ExecSpace& space,
                const float* logp,    // (N)
                const float* mask,    // (N), 0 or 1
                float scale,
                float* loss,          // (1)
                float* dlogp,         // (N)
                int N);

// ---------------------------------------------------------------------------------------------
// Definitions. Rows are long (the vocabulary), so the forward gives each row a team that reads it
// once in 16-byte packs, keeping an online softmax's running statistics (as a flash kernel does);
// the backward is elementwise once lse is known, one pack of a row per work item.

namespace detail {

// A row's (part's) softmax statistics relative to its running maximum m (of the raw logits), at
// temperature T: mass = sum_v exp((x_v - m) / T), moment = sum_v exp((x_v - m) / T) (x_v - m) / T.
// `+=` merges two parts (what Kokkos::Sum reduces with): both are moved to the larger maximum,
// which scales a part's mass by f = exp((m - m') / T) and its moment by f with the shift's term.
struct SoftmaxParts {
  float max = -INFINITY, mass = 0.0f, moment = 0.0f, temperature = 1.0f;

  KOKKOS_INLINE_FUNCTION void rescale(float new_max) {
    if (max == new_max) return;
    const float shift = (max - new_max) / temperature;   // <= 0; -inf for an empty part
    const float f = max == -INFINITY ? 0.0f : expf(shift);
    moment = max == -INFINITY ? 0.0f : f * (moment + mass * shift);
    mass *= f;
    max = new_max;
  }
  KOKKOS_INLINE_FUNCTION SoftmaxParts& operator+=(const SoftmaxParts& o) {
    if (o.max == -INFINITY) return *this;
    temperature = o.temperature;
    SoftmaxParts other = o;
    const float m = fmaxf(max, o.max);
    rescale(m);
    other.rescale(m);
    mass += other.mass;
    moment += other.moment;
    return *this;
  }
#if KOKKOS_VERSION < 40000
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile SoftmaxParts& o) volatile {
    SoftmaxParts self{max, mass, moment, temperature}, other{o.max, o.mass, o.moment, o.temperature};
    self += other;
    max = self.max;
    mass = self.mass;
    moment = self.moment;
    temperature = self.temperature;
  }
#endif
  // Adds x_0 .. x_{k-1}, moving to their maximum first so each exp is <= 1.
  template <class T>
  KOKKOS_INLINE_FUNCTION void add(const T* x, int k, bool with_moment) {
    float m = max;
    for (int j = 0; j < k; ++j) m = fmaxf(m, static_cast<float>(x[j]));
    rescale(m);
    for (int j = 0; j < k; ++j) {
      const float s = (static_cast<float>(x[j]) - m) / temperature;
      const float e = expf(s);
      mass += e;
      if (with_moment) moment += e * s;
    }
  }
};

// dL/dlogit of one element (see token_logprob_backward); dentropy = 0 without the entropy term.
KOKKOS_INLINE_FUNCTION float logit_gradient(float logit, bool hit, float temperature, float lse, float dlogp,
                                            float entropy, float dentropy) {
  const float log_p = logit / temperature - lse;
  const float p = expf(log_p);
  float d = dlogp * ((hit ? 1.0f : 0.0f) - p);
  if (dentropy != 0.0f) d -= dentropy * p * (log_p + entropy);
  return d / temperature;
}

}  // namespace detail
}  // namespace shardrl::kernels

namespace Kokkos {
template <>
struct reduction_identity<shardrl::kernels::detail::SoftmaxParts> {
  KOKKOS_FORCEINLINE_FUNCTION static shardrl::kernels::detail::SoftmaxParts sum() {
    return shardrl::kernels::detail::SoftmaxParts();
  }
};
}  // namespace Kokkos

namespace shardrl::kernels {

template <class T>
void token_logprob_forward(const ExecSpace& space, const T* logits, const std::int32_t* targets, float temperature,
                           float* logp, float* lse, float* entropy, int N, int V) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  // Packs never straddle two rows: each row starts aligned and holds whole packs.
  const bool aligned = packs_aligned(logits) && V % Packed<T>::width == 0;
  const int width = aligned ? Packed<T>::width : 1;
  const int packs = V / width;
  const bool with_entropy = entropy != nullptr;
  // A row is read once from memory: enough threads per team to keep its loads in flight.
  const Policy policy = kDeviceIsGpu ? Policy(space, N, 256) : Policy(space, N, Kokkos::AUTO);
  Kokkos::parallel_for(
      "token_logprob_forward", policy, KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T* row = logits + static_cast<long>(n) * V;
        detail::SoftmaxParts parts;
        parts.temperature = temperature;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, packs),
            [&](const int p, detail::SoftmaxParts& acc) {
              acc.temperature = temperature;
              if (width == 1) {
                acc.add(row + p, 1, with_entropy);
              } else {
                const Packed<T> x = load_packed(row + static_cast<long>(p) * width);
                acc.add(x.v, Packed<T>::width, with_entropy);
              }
            },
            Kokkos::Sum<detail::SoftmaxParts>(parts));
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          // With s_v = (x_v - max) / T: lse = max / T + log(mass), and the entropy
          // H = log(mass) - sum_v e_v s_v / mass.
          const float log_mass = logf(parts.mass);
          lse[n] = parts.max / temperature + log_mass;
          const std::int32_t target = targets[n];   // negative: not scored (logp 0)
          logp[n] = target < 0 ? 0.0f : (static_cast<float>(row[target]) - parts.max) / temperature - log_mass;
          if (with_entropy) entropy[n] = target < 0 ? 0.0f : log_mass - parts.moment / parts.mass;
        });
      });
}

template <class T>
void token_logprob_backward(const ExecSpace& space, const T* logits, const std::int32_t* targets, float temperature,
                            const float* lse, const float* dlogp, const float* entropy, const float* dentropy,
                            T* dlogits, int N, int V) {
  const bool aligned = packs_aligned(logits, dlogits) && V % Packed<T>::width == 0;
  const int width = aligned ? Packed<T>::width : 1;
  const long packs_per_row = V / width;
  const bool with_entropy = dentropy != nullptr;
  Kokkos::parallel_for(
      "token_logprob_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * packs_per_row),
      KOKKOS_LAMBDA(const long item) {
        const long n = item / packs_per_row;
        const int v0 = static_cast<int>(item - n * packs_per_row) * width;
        const long e0 = n * V + v0;
        if (width == 1) {
          dlogits[e0] = T(detail::logit_gradient(static_cast<float>(logits[e0]), v0 == targets[n], temperature, lse[n],
                                                 dlogp[n], with_entropy ? entropy[n] : 0.0f,
                                                 with_entropy ? dentropy[n] : 0.0f));
          return;
        }
        // Reads its pack before it writes it, so dlogits may be the logits.
        const Packed<T> x = load_packed(logits + e0);
        const int target = targets[n];
        const float row_lse = lse[n], row_dlogp = dlogp[n];
        const float row_entropy = with_entropy ? entropy[n] : 0.0f, row_dentropy = with_entropy ? dentropy[n] : 0.0f;
        Packed<T> d;
        for (int j = 0; j < Packed<T>::width; ++j)
          d.v[j] = T(detail::logit_gradient(static_cast<float>(x.v[j]), v0 + j == target, temperature, row_lse,
                                            row_dlogp, row_entropy, row_dentropy));
        store_packed(dlogits + e0, d);
      });
}

// Defined inline here although declared without it: the kernels are header-only.

}  // namespace shardrl::kernels
