// RMSNorm over the last dimension: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), computed
// in fp32. Also used per head for Qwen3's q/k norms (rows = tokens * heads, cols = head_dim).
#pragma once

#include <cmath>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

template <class T>
void rmsnorm_forward(const ExecSpace& space,
                     const T* x,     // (R, C)
                     const T* w,     // (C)
                     T* y,           // (R, C)
                     float* rstd,    // (R)  saved for backward
                     int R, int C, float eps) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  // One team per row: the sum of squares is a team reduction, so a row is read coalesced.
  Kokkos::parallel_for(
      "rmsnorm_forward", Kokkos::TeamPolicy<ExecSpace>(space, R, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const long base = static_cast<long>(team.league_rank()) * C;
        float sum_sq = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](const int c, float& acc) {
              const float v = static_cast<float>(x[base + c]);
              acc += v * v;
            },
            sum_sq);
        const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(C) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int c) {
          y[base + c] = T(static_cast<float>(x[base + c]) * r * static_cast<float>(w[c]));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd[team.league_rank()] = r; });
      });
}

// dx = beta * dx + d(loss)/dx        (beta = 1 adds into a residual-stream gradient)
// dw += sum over rows of dy * x * rstd   (fp32 gradient, accumulated)
template <class T>
void rmsnorm_backward(const ExecSpace& space,
                      const T* x,          // (R, C)
                      const T* w,          // (C)
                      const float* rstd,   // (R)
                      const T* dy,         // (R, C)
                      T* dx,               // (R, C)
                      float* dw,           // (C)
                      int R, int C, float beta) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  // With xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)).
  Kokkos::parallel_for(
      "rmsnorm_backward_dx", Kokkos::TeamPolicy<ExecSpace>(space, R, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const long base = static_cast<long>(team.league_rank()) * C;
        const float r = rstd[team.league_rank()];
        float sum_gx = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](const int c, float& acc) {
              acc += static_cast<float>(dy[base + c]) * static_cast<float>(w[c]) * static_cast<float>(x[base + c]);
            },
            sum_gx);
        const float mean_gx = sum_gx * r / static_cast<float>(C);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int c) {
          const float g = static_cast<float>(dy[base + c]) * static_cast<float>(w[c]);
          const float xhat = static_cast<float>(x[base + c]) * r;
          const float d = r * (g - xhat * mean_gx);
          // beta == 0 must not read dx: a fresh buffer may hold NaN, and 0 * NaN is NaN.
          dx[base + c] = beta == 0.0f ? T(d) : T(beta * static_cast<float>(dx[base + c]) + d);
        });
      });
  // dw: one team per column reducing over rows, so the sum has a fixed order (no atomics)
  // and the result does not depend on the schedule.
  Kokkos::parallel_for(
      "rmsnorm_backward_dw", Kokkos::TeamPolicy<ExecSpace>(space, C, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int c = team.league_rank();
        float sum = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, R),
            [&](const int r, float& acc) {
              const long i = static_cast<long>(r) * C + c;
              acc += static_cast<float>(dy[i]) * static_cast<float>(x[i]) * rstd[r];
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { dw[c] += sum; });
      });
}

}  // namespace shardrl::kernels
