// Mixture-of-experts token permutation, forward and backward: the routed copies of the tokens
// are grouped by expert (so each expert's rows are contiguous for its GEMMs), and the experts'
// outputs are combined back per token with the gate weights. No atomics: every output element
// is written by one thread, sums run over a token's k slots in slot order.
//
// An assignment a = n * k + s is token n's slot s. The permuted order lists the assignments by
// (expert, token, slot); pos[a] is assignment a's row in it; expert e owns rows
// offsets[e] .. offsets[e + 1].
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

// Built on the host from the routing (the experts' row counts size their GEMMs anyway).
// order: (N * k) assignments in permuted order; pos: (N * k) the inverse; offsets: (E + 1).
inline void build_expert_permutation(const std::int32_t* expert, int N, int k, int E, std::int32_t* order,
                                     std::int32_t* pos, std::int32_t* offsets) {
  const long A = static_cast<long>(N) * k;
  std::vector<std::int32_t> next(static_cast<std::size_t>(E) + 1, 0);
  for (long a = 0; a < A; ++a) ++next[static_cast<std::size_t>(expert[a]) + 1];
  for (int e = 0; e < E; ++e) next[e + 1] += next[e];
  for (int e = 0; e <= E; ++e) offsets[e] = next[e];
  for (long a = 0; a < A; ++a) {   // ascending a: (token, slot) order within each expert
    const std::int32_t p = next[expert[a]]++;
    order[p] = static_cast<std::int32_t>(a);
    pos[a] = p;
  }
}

// xp(p, :) = x(order[p] / k, :)     (N * k rows of width D)
template <class T>
void moe_permute(const ExecSpace& space, int N, int k, int D, const std::int32_t* order, const T* x, T* xp) {
  const long count = static_cast<long>(N) * k * D;
  Kokkos::parallel_for(
      "moe_permute", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const long p = i / D, d = i % D;
        xp[i] = x[static_cast<long>(order[p] / k) * D + d];
      });
}

// dx(n, :) (+)= sum over slots s of dxp(pos[n * k + s], :)    (written when !accumulate)
template <class T>
void moe_permute_backward(const ExecSpace& space, int N, int k, int D, const std::int32_t* pos, const T* dxp, T* dx,
                          bool accumulate) {
  const long count = static_cast<long>(N) * D;
  Kokkos::parallel_for(
      "moe_permute_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const long n = i / D, d = i % D;
        float sum = accumulate ? static_cast<float>(dx[i]) : 0.0f;
        for (int s = 0; s < k; ++s) sum += static_cast<float>(dxp[static_cast<long>(pos[n * k + s]) * D + d]);
        dx[i] = T(sum);
      });
}

// out(n, :) (+)= sum over slots s of gate(n, s) * yp(pos[n * k + s], :)    (written when !accumulate)
template <class T>
void moe_combine(const ExecSpace& space, int N, int k, int D, const std::int32_t* pos, const float* gate, const T* yp,
                 T* out, bool accumulate) {
  const long count = static_cast<long>(N) * D;
  Kokkos::parallel_for(
      "moe_combine", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const long n = i / D, d = i % D;
        float sum = accumulate ? static_cast<float>(out[i]) : 0.0f;
        for (int s = 0; s < k; ++s)
          sum += gate[n * k + s] * static_cast<float>(yp[static_cast<long>(pos[n * k + s]) * D + d]);
        out[i] = T(sum);
      });
}

// Backward of moe_combine: dyp(pos[a], :) = gate(a) * dout(n, :) and dgate(a) = dout(n, :) . yp(pos[a], :)
// for every assignment a = n * k + s (both written).
template <class T>
void moe_combine_backward(const ExecSpace& space, int N, int k, int D, const std::int32_t* pos, const float* gate,
                          const T* yp, const T* dout, T* dyp, float* dgate) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "moe_combine_backward", Kokkos::TeamPolicy<ExecSpace>(space, N * k, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long a = team.league_rank();
        const long n = a / k;
        const long row = static_cast<long>(pos[a]) * D;
        const float g = gate[a];
        float dot = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, D),
            [&](const int d, float& acc) {
              const float dv = static_cast<float>(dout[n * D + d]);
              dyp[row + d] = T(g * dv);
              acc += dv * static_cast<float>(yp[row + d]);
            },
            dot);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { dgate[a] = dot; });
      });
}

}  // namespace shardrl::kernels
