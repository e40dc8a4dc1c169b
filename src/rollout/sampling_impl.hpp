// The sampling kernel (included by sampling.hpp): one team per row; the thresholds of top-k
// and top-p are found by bisection over the row's values (each step one team reduction), so no
// row is ever sorted and nothing is allocated.
#pragma once

namespace shardrl::sampling_detail {

// The tempered row's normaliser sum_v e_v and first moment sum_v e_v s_v, with
// s_v = (logit - max) / t and e_v = exp(s_v), reduced together in one pass.
struct MassMoment {
  float mass = 0.0f, moment = 0.0f;
  KOKKOS_INLINE_FUNCTION MassMoment& operator+=(const MassMoment& o) {
    mass += o.mass;
    moment += o.moment;
    return *this;
  }
#if KOKKOS_VERSION < 40000
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile MassMoment& o) volatile {
    mass += o.mass;
    moment += o.moment;
  }
#endif
};

}  // namespace shardrl::sampling_detail

namespace Kokkos {
template <>
struct reduction_identity<shardrl::sampling_detail::MassMoment> {
  KOKKOS_FORCEINLINE_FUNCTION static shardrl::sampling_detail::MassMoment sum() {
    return shardrl::sampling_detail::MassMoment();
  }
};
}  // namespace Kokkos

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
KOKKOS_INLINE_FUNCTION MassMoment mass_and_moment(const Member& team, const T* l, int V, float max, float t) {
  MassMoment m;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, V),
      [&](const int v, MassMoment& acc) {
        const float s = (static_cast<float>(l[v]) - max) / t;
        const float e = expf(s);
        acc.mass += e;
        acc.moment += e * s;
      },
      Kokkos::Sum<MassMoment>(m));
  return m;
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
                   std::int32_t* token, float* logp, float* entropy, int R, int V) {
  using namespace sampling_detail;
  const float temperature = opt.temperature;
  const int top_k = opt.top_k;
  const float top_p = opt.top_p;
  auto draw = KOKKOS_LAMBDA(const Member& team) {
    const int r = team.league_rank();
    const T* l = logits + static_cast<long>(r) * V;
    const float max = row_max(team, l, V);
    // The recorded log-probability and entropy are of the tempered distribution (temperature 1
    // when greedy), formed as the train phase forms them (kernels/cross_entropy.hpp):
    // log p = s - log(mass), H = log(mass) - moment / mass. Without top-k its mass is also the
    // mass the draw below needs.
    const float t = temperature > 0.0f ? temperature : 1.0f;   // sampling_temperature(opt)
    const MassMoment tempered = mass_and_moment(team, l, V, max, t);
    int chosen = V;
    if (temperature <= 0.0f) {
      // Greedy: the first index holding the maximum.
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, V),
          [&](const int v, int& acc) {
            if (static_cast<float>(l[v]) == max && v < acc) acc = v;
          },
          Kokkos::Min<int>(chosen));
    } else {
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
      const float kept = cut > -INFINITY ? mass_above(team, l, V, max, temperature, cut) : tempered.mass;
      if (top_p < 1.0f) {
        float lo = cut > -INFINITY ? cut : row_min(team, l, V), hi = max;
        for (int it = 0; it < 64 && lo < hi; ++it) {
          const float mid = 0.5f * (lo + hi);
          if (mid <= lo || mid >= hi) break;
          if (mass_above(team, l, V, max, temperature, mid) >= top_p * kept) lo = mid; else hi = mid;
        }
        cut = mass_above(team, l, V, max, temperature, hi) >= top_p * kept ? hi : lo;
      }
      const float total = top_p < 1.0f ? mass_above(team, l, V, max, temperature, cut) : kept;
      const float target = uniform01(keys[r]) * total;
      // Inverse CDF in index order, in two levels: each thread's contiguous block of the
      // vocabulary has a mass, a scan over the blocks finds the block where the target falls,
      // and one thread walks that block to the first token whose running mass passes it. (A
      // team scan over the whole vocabulary synchronises once per team_size tokens: 2 ms per
      // draw with llama's 128K vocabulary on an H200.)
      auto weight = [&](const int v) {
        const float x = static_cast<float>(l[v]);
        return x >= cut ? expf((x - max) / temperature) : 0.0f;
      };
      const int blocks = team.team_size();
      const int per = (V + blocks - 1) / blocks;
      int block = blocks;
      float before = 0.0f;   // mass of the blocks ahead of `block`
      Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, blocks), [&](const int b, float& prefix, const bool final) {
        float w = 0.0f;
        for (int v = b * per; v < V && v < (b + 1) * per; ++v) w += weight(v);
        if (final && w > 0.0f && prefix <= target && target < prefix + w) {   // exactly one b
          block = b;
          before = prefix;
        }
        prefix += w;
      });
      // One thread found the block: share it (the others hold `blocks` and 0).
      team.team_reduce(Kokkos::Min<int>(block));
      team.team_reduce(Kokkos::Max<float>(before));
      int pick = V;
      Kokkos::single(
          Kokkos::PerTeam(team),
          [&](int& found) {
            found = V;
            if (block >= blocks) return;
            float run = before;
            int last_kept = V;   // if rounding leaves the target past the block's tokens
            for (int v = block * per; v < V && v < (block + 1) * per; ++v) {
              const float w = weight(v);
              if (w <= 0.0f) continue;
              last_kept = v;
              if (run <= target && target < run + w) {
                found = v;
                return;
              }
              run += w;
            }
            found = last_kept;
          },
          pick);
      // Rounding can leave the target at the very end: take the last kept token then.
      chosen = pick;
      if (pick == V) {   // the same on every thread of the team (pick was broadcast)
        int last = -1;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](const int v, int& acc) {
              if (static_cast<float>(l[v]) >= cut && v > acc) acc = v;
            },
            Kokkos::Max<int>(last));
        chosen = last;
      }
    }
    Kokkos::single(Kokkos::PerTeam(team), [&]() {
      token[r] = chosen;
      const float log_mass = logf(tempered.mass);
      logp[r] = (static_cast<float>(l[chosen]) - max) / t - log_mass;
      entropy[r] = log_mass - tempered.moment / tempered.mass;
    });
  };
  // One team per row makes several passes over the vocabulary: as many threads as the kernel
  // allows. With Kokkos::AUTO a draw from llama's 128K vocabulary took about 1 ms on an H200;
  // with the largest team a batch-1 decode step went from 3.1 to 2.1 ms.
  const int team_size = Policy(space, R, 1).team_size_max(draw, Kokkos::ParallelForTag());
  Kokkos::parallel_for("sample_tokens", Policy(space, R, team_size), draw);
}

}  // namespace shardrl
