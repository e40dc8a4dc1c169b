// The sampling kernel (included by sampling.hpp): one team per row; the thresholds of top-k
// and top-p are found by bisection over the row's values (each step one team reduction), so no
// row is ever sorted and nothing is allocated.
#pragma once

namespace shardrl {

namespace sampling_detail {

using Policy = Kokkos::TeamPolicy<ExecSpace>;
using Member = Policy::member_type;

template <class T>
KOKKOS_INLINE_FUNCTION float row_max(const Member& team, const T* l, int V) {
  float m = -INFINITY;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V), [&](const int v, float& acc) { acc = fmaxf(acc, static_cast<float>(l[v])); },
      Kokkos::Max<float>(m));
  return m;
}

template <class T>
KOKKOS_INLINE_FUNCTION float row_min(const Member& team, const T* l, int V) {
  float m = INFINITY;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V), [&](const int v, float& acc) { acc = fminf(acc, static_cast<float>(l[v])); },
      Kokkos::Min<float>(m));
  return m;
}

// Sum over v with logit >= cut of exp((l - max) / temperature).
template <class T>
KOKKOS_INLINE_FUNCTION float mass_above(const Member& team, const T* l, int V, float max, float temperature,
                                        float cut) {
  float s = 0.0f;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V),
      [&](const int v, float& acc) {
        const float x = static_cast<float>(l[v]);
        if (x >= cut) acc += expf((x - max) / temperature);
      },
      s);
  return s;
}

template <class T>
KOKKOS_INLINE_FUNCTION int count_above(const Member& team, const T* l, int V, float cut) {
  int c = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V), [&](const int v, int& acc) { acc += static_cast<float>(l[v]) >= cut ? 1 : 0; },
      c);
  return c;
}

}  // namespace sampling_detail

template <class T>
void sample_tokens(const ExecSpace& space, const T* logits, const std::uint64_t* keys, const SamplingOptions& opt,
                   std::int32_t* token, float* logp, int R, int V) {
  using namespace sampling_detail;
  const float temperature = opt.temperature;
  const int top_k = opt.top_k;
  const float top_p = opt.top_p;
  Kokkos::parallel_for(
      "sample_tokens", Policy(space, R, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank();
        const T* l = logits + static_cast<long>(r) * V;
        const float max = row_max(team, l, V);
        // Greedy: the first index holding the maximum.
        int arg = V;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](const int v, int& acc) {
              if (static_cast<float>(l[v]) == max && v < acc) acc = v;
            },
            Kokkos::Min<int>(arg));
        int chosen = arg;
        if (temperature > 0.0f) {
          // Everything at or above `cut` stays. top-k: the largest cut keeping >= k tokens.
          float cut = -INFINITY;
          if (top_k > 0 && top_k < V) {
            float lo = row_min(team, l, V), hi = max;   // count(lo) = V >= k, count(hi) >= 1
            for (int it = 0; it < 64 && lo < hi; ++it) {
              const float mid = 0.5f * (lo + hi);
              if (mid <= lo || mid >= hi) break;   // adjacent floats: done
              if (count_above(team, l, V, mid) >= top_k) lo = mid; else hi = mid;
            }
            cut = count_above(team, l, V, hi) >= top_k ? hi : lo;
          }
          // top-p on what top-k kept: the largest cut whose kept mass reaches top_p of it.
          const float kept = mass_above(team, l, V, max, temperature, cut);
          if (top_p < 1.0f) {
            float lo = cut > -INFINITY ? cut : row_min(team, l, V), hi = max;
            for (int it = 0; it < 64 && lo < hi; ++it) {
              const float mid = 0.5f * (lo + hi);
              if (mid <= lo || mid >= hi) break;
              if (mass_above(team, l, V, max, temperature, mid) >= top_p * kept) lo = mid; else hi = mid;
            }
            cut = mass_above(team, l, V, max, temperature, hi) >= top_p * kept ? hi : lo;
          }
          const float total = mass_above(team, l, V, max, temperature, cut);
          const float target = uniform01(keys[r]) * total;
          // Inverse CDF in index order: the first token whose running mass passes the target.
          int pick = V;
          Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, V), [&](const int v, float& prefix, const bool final) {
            const float x = static_cast<float>(l[v]);
            const float w = x >= cut ? expf((x - max) / temperature) : 0.0f;
            if (final && w > 0.0f && prefix <= target && target < prefix + w) pick = v;   // exactly one v
            prefix += w;
          });
          // `pick` was set by one thread of the team: share it.
          team.team_reduce(Kokkos::Min<int>(pick));
          // Rounding can leave the target at the very end: take the last kept token then.
          int last = -1;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, V),
              [&](const int v, int& acc) {
                if (static_cast<float>(l[v]) >= cut && v > acc) acc = v;
              },
              Kokkos::Max<int>(last));
          chosen = pick < V ? pick : last;
        }
        // log softmax at temperature 1 of the chosen token.
        float z = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V), [&](const int v, float& acc) { acc += expf(static_cast<float>(l[v]) - max); },
            z);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          token[r] = chosen;
          logp[r] = static_cast<float>(l[chosen]) - max - logf(z);
        });
      });
}

}  // namespace shardrl
