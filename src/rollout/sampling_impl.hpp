// The sampling kernels (included by sampling.hpp). Plain sampling: a team per chunk of a row's
// vocabulary, the row's last to finish picking (sampling.hpp, kSampleChunkTokens). Greedy, top-k and
// top-p: one team per row; the thresholds of top-k and top-p are found by bisection over the
// row's values (each step one team reduction), so no row is ever sorted. Nothing is allocated.
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
        if (e > 0.0f) acc.moment += e * s;   // a logit of -inf adds 0, not 0 * -inf
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

// What a draw records (kernels/sample_plain.hpp), from a reduced mass and moment.
KOKKOS_INLINE_FUNCTION void record_draw(float logit, float max, float t, const MassMoment& m, float& logp,
                                        float& entropy) {
  kernels::record_draw(logit, max, t, m.mass, m.moment, logp, entropy);
}

// The inverse CDF over indices [0, n) in index order: the first v whose running weight, from
// `start`, passes `target`; past the found block's last token (rounding), that block's last
// token whose weight moves the running sum; n only when none does. Two levels: each thread's contiguous
// block has a mass, a scan over the blocks finds the block where the target falls, and one
// thread walks that block. (A team scan over the whole range synchronises once per team_size
// tokens: 2 ms per draw with llama's 128K vocabulary on an H200.) The same on every thread of
// the team.
//
// The block is the last one with weight whose lower bound, start + prefix, is at or below the
// target: lower bounds alone. Testing each block's upper bound too left gaps and overlaps of an
// ulp between neighbours, whose bounds are rounded from different sums (a tree scan's prefix of
// b + 1 is not prefix_b + w_b, and (start + P) + w is not start + (P + w)): a target in a gap
// fell to the chunk's last token (any token, however unlikely), one in an overlap to the wrong
// block's first; about one draw in 10^4 on a GPU.
//
// The walk sums the block's weights from 0 against the target's distance past the block's lower
// bound. Summed onto the lower bound itself, a weight below half its ulp never moved the sum:
// behind a dominant token (weight 1), every token of weight under 6e-8 (a logit 16.6 below it at
// t = 1) was unreachable, and a target in their block fell to the fallback, one token.
template <class Weight>
KOKKOS_INLINE_FUNCTION int inverse_cdf(const Member& team, int n, const Weight& weight, float target, float start) {
  const int blocks = team.team_size();
  const int per = (n + blocks - 1) / blocks;
  int block = -1;
  float before = 0.0f;   // `block`'s lower bound
  Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, blocks), [&](const int b, float& prefix, const bool final) {
    float w = 0.0f;
    for (int v = b * per; v < n && v < (b + 1) * per; ++v) w += weight(v);
    if (final && w > 0.0f && start + prefix <= target && b > block) {
      block = b;
      before = start + prefix;
    }
    prefix += w;
  });
  // The team's last such block, and its lower bound from the thread that scanned it.
  const int mine = block;
  team.team_reduce(Kokkos::Max<int>(block));
  float bound = mine == block ? before : -INFINITY;
  team.team_reduce(Kokkos::Max<float>(bound));
  before = bound;
  int pick = n;
  Kokkos::single(
      Kokkos::PerTeam(team),
      [&](int& found) {
        found = n;
        if (block < 0) return;
        const float rest = target - before;
        float run = 0.0f;
        int last_kept = n;   // if rounding leaves the target past the block's tokens
        for (int v = block * per; v < n && v < (block + 1) * per; ++v) {
          const float w = weight(v);
          if (w <= 0.0f) continue;
          // Only a token whose weight still moves the running sum from the bound is taken: not
          // one of weight e^-60 at the chunk's end (the fallback past the block's end, rounding)
          // nor at the block's start (a target on the bound itself).
          const bool moves = before + (run + w) > before + run;
          if (moves) last_kept = v;
          if (moves && rest < run + w) {
            found = v;
            return;
          }
          run += w;
        }
        found = last_kept;
      },
      pick);
  return pick;
}

// Chunk c of a row of V logits: its tokens, and where chunk rc = r * C + c starts.
KOKKOS_INLINE_FUNCTION int chunk_tokens(int V, int c) {
  return V - c * kSampleChunkTokens < kSampleChunkTokens ? V - c * kSampleChunkTokens : kSampleChunkTokens;
}
KOKKOS_INLINE_FUNCTION long chunk_start(int V, int C, int rc) {
  return static_cast<long>(rc / C) * V + static_cast<long>(rc % C) * kSampleChunkTokens;
}

// Plain sampling (temperature > 0, no top-k or top-p) by chunks of kSampleChunkTokens
// (kernels/sample_plain.hpp), in one launch of a team per chunk: each team reduces its chunk's
// maximum m, then its mass sum e^((l - m) / t) and first moment under m, and counts itself done;
// the row's last team to finish rescales the chunks to the row's maximum, sums them in chunk
// order, finds the chunk where the row's uniform number falls and walks it. The count is an
// atomic, the chunks' sums are written before it (a fence) and read after it, so it holds on any
// backend; GPU builds take the CUDA kernel instead (sample_plain_by_chunks below), so this one
// runs on the host backends. The result of a row depends on V, not on R or on the order the
// teams ran in.
template <class T>
void sample_plain_by_teams(const ExecSpace& space, const T* logits, const std::uint64_t* keys, float temperature,
                           std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch) {
  using Shared = Kokkos::View<float*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const int C = kernels::sample_chunks(V);
  const std::size_t shared_bytes = Shared::shmem_size(4 * static_cast<std::size_t>(C));
  Kokkos::parallel_for(
      "sample_plain", Policy(space, R * C, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(shared_bytes)),
      KOKKOS_LAMBDA(const Member& team) {
        const int rc = team.league_rank(), r = rc / C, c = rc % C;
        float* row = scratch + kernels::sample_row_scratch(C, r);
        auto* done = reinterpret_cast<unsigned int*>(row + 3L * C);
        const int n = chunk_tokens(V, c);
        const T* l = logits + chunk_start(V, C, rc);
        // A chunk with a NaN logit (a diverged model) has NaN for its maximum and sums, which the
        // row's then carry into the recorded log-probability; one whose logits are all -inf has
        // no mass.
        int nans = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](const int v, int& acc) { acc += std::isnan(static_cast<float>(l[v])) ? 1 : 0; }, nans);
        const float m = nans > 0 ? NAN : row_max(team, l, n);
        const MassMoment own = nans > 0       ? MassMoment{NAN, NAN}
                               : m > -INFINITY ? mass_and_moment(team, l, n, m, temperature)
                                               : MassMoment{};
        int last_done = 0;
        Kokkos::single(
            Kokkos::PerTeam(team),
            [&](int& is_last) {
              row[3 * c] = m;
              row[3 * c + 1] = own.mass;
              row[3 * c + 2] = own.moment;
              Kokkos::memory_fence();   // the sums are out before the count says so
              is_last = Kokkos::atomic_fetch_add(done, 1u) == static_cast<unsigned int>(C - 1) ? 1 : 0;
            },
            last_done);
        if (!last_done) return;
        Kokkos::memory_fence();
        // The row's chunks (written by other teams: read past any cache that may hold them) into
        // shared memory, then each chunk's scale to the row's maximum M (kernels/sample_plain.hpp's
        // row_mass_moment), the row's sums and the chunk where the target falls.
        Shared chunk(team.team_scratch(0), 3 * C), scale(chunk.data() + 3 * C, C);
        const volatile float* written = row;   // volatile: loaded anew, as the fence's other half
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 3 * C), [&](const int i) { chunk(i) = written[i]; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { *done = 0u; });   // for the next draw (a later launch)
        team.team_barrier();
        float max = -INFINITY;
        for (int i = 0; i < C; ++i) max = fmaxf(max, chunk(3 * i));
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C),
                             [&](const int i) { scale(i) = kernels::chunk_scale(chunk(3 * i), max, temperature); });
        team.team_barrier();
        float mass = 0.0f, moment = 0.0f;
        kernels::row_mass_moment(C, chunk.data(), scale.data(), max, temperature, mass, moment);
        const float target = uniform01(keys[r]) * mass;
        const kernels::ChunkPick chosen_chunk = kernels::pick_chunk(C, chunk.data(), scale.data(), target);
        const T* lr = logits + static_cast<long>(r) * V;
        if (chosen_chunk.at < 0) {   // no chunk has mass: logits all NaN (a diverged model)
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            token[r] = -1;
            logp[r] = entropy[r] = NAN;
          });
          return;
        }
        const int at = chosen_chunk.at;
        const float before = chosen_chunk.before;
        const int n_at = chunk_tokens(V, at);
        const T* la = lr + static_cast<long>(at) * kSampleChunkTokens;
        // A token's weight as its chunk's mass summed it, scaled as the chunk was: the walk's sums
        // and the chunk's weight differ by rounding only.
        const float at_max = chunk(3 * at), at_scale = scale(at);
        auto token_weight = [&](const int v) {
          return at_scale * expf((static_cast<float>(la[v]) - at_max) / temperature);
        };
        int pick = inverse_cdf(team, n_at, token_weight, target, before);
        if (pick == n_at) {   // no token of the chunk has weight (a guard: its mass says otherwise)
          int last_kept = -1;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n_at),
              [&](const int v, int& acc) {
                if (token_weight(v) > 0.0f && v > acc) acc = v;
              },
              Kokkos::Max<int>(last_kept));
          pick = last_kept >= 0 ? last_kept : n_at - 1;
        }
        const int chosen = at * kSampleChunkTokens + pick;
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          token[r] = chosen;
          record_draw(static_cast<float>(lr[chosen]), max, temperature, MassMoment{mass, moment}, logp[r], entropy[r]);
        });
      });
}

// The plain draw: GPU builds take the same steps in CUDA (kernels/sample_plain.cu: warp
// shuffles, 16-byte loads, a dependent launch), where Kokkos' team reductions and single-thread
// sections made the draw about 30 us of a batch-1 step and 70 us at 64 rows on an H200.
template <class T>
void sample_plain_by_chunks(const ExecSpace& space, const T* logits, const std::uint64_t* keys, float temperature,
                            std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch) {
#if defined(KOKKOS_ENABLE_CUDA)
  kernels::sample_plain_cuda(space.cuda_stream(), logits, keys, temperature, token, logp, entropy, R, V, scratch);
#else
  sample_plain_by_teams(space, logits, keys, temperature, token, logp, entropy, R, V, scratch);
#endif
}

}  // namespace sampling_detail

template <class T>
void sample_tokens(const ExecSpace& space, const T* logits, const std::uint64_t* keys, const SamplingOptions& opt,
                   std::int32_t* token, float* logp, float* entropy, int R, int V, float* scratch) {
  using namespace sampling_detail;
  const float temperature = opt.temperature;
  const int top_k = opt.top_k;
  const float top_p = opt.top_p;
  const bool plain = temperature > 0.0f && (top_k <= 0 || top_k >= V) && top_p >= 1.0f;
  if (plain) return sample_plain_by_chunks(space, logits, keys, temperature, token, logp, entropy, R, V, scratch);
  // Greedy, top-k and top-p (bisections over the row): one team per row.
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
      auto weight = [&](const int v) {
        const float x = static_cast<float>(l[v]);
        return x >= cut ? expf((x - max) / temperature) : 0.0f;
      };
      const int pick = inverse_cdf(team, V, weight, target, 0.0f);
      // No kept token of weight (a guard: the kept mass says otherwise): the last kept token.
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
      // Logits that are all NaN (a diverged model) leave no index holding the maximum or above the
      // cut (chosen stays V, or -1): the row gets -1, which the next step refuses naming it,
      // instead of a read past the row's logits.
      if (chosen < 0 || chosen >= V) {
        token[r] = -1;
        logp[r] = entropy[r] = NAN;
        return;
      }
      token[r] = chosen;
      record_draw(static_cast<float>(l[chosen]), max, t, tempered, logp[r], entropy[r]);
    });
  };
  // One team per row makes several passes over the vocabulary: as many threads as the kernel
  // allows. With Kokkos::AUTO a draw from llama's 128K vocabulary took about 1 ms on an H200;
  // with the largest team a batch-1 decode step went from 3.1 to 2.1 ms.
  const int team_size = Policy(space, R, 1).team_size_max(draw, Kokkos::ParallelForTag());
  Kokkos::parallel_for("sample_tokens", Policy(space, R, team_size), draw);
}

}  // namespace shardrl
