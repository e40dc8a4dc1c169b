// RMSNorm over the last dimension: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps), computed
// in fp32. Also used per head for Qwen3's q/k norms (rows = tokens * heads, cols = head_dim).
// Rows move in 16-byte packs (kernels/packed.hpp) when C is a multiple of the pack width and the
// pointers are aligned. A row's sums go over groups of that width in every case (each thread of a
// team adds its groups' elements in order), so rstd and dx do not depend on alignment; on one
// thread (Serial) that is the plain left-to-right sum.
#pragma once

#include <cmath>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/packed.hpp"

namespace shardrl::kernels {

namespace detail {

// The columns [k * W, k * W + W) of a row, clipped to C: the unit in which a team adds up a row.
KOKKOS_INLINE_FUNCTION int rmsnorm_group_end(int k, int W, int C) { return k * W + W < C ? k * W + W : C; }

// A row's scale from its sum of squares over C elements, and one element of the output: every
// kernel that normalises rows (here, and the decode step's kernels/qk_rope_cache.hpp) forms them
// through these, so that they round alike.
KOKKOS_INLINE_FUNCTION float rmsnorm_scale(float sum_sq, int C, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(C) + eps);
}
template <class T>
KOKKOS_INLINE_FUNCTION T rmsnorm_element(T x, float scale, T w) {
  return T(static_cast<float>(x) * scale * static_cast<float>(w));
}

// Short rows (Qwen3's q/k norms: head_dim 128, 16 packs of bf16) go several to a team, a row to
// a thread and its groups to the thread's vector lanes, instead of a team per row: a team per
// 128-column row left most of a GPU team's threads idle, and those norms took about 0.13 ms per
// layer for 17 MB (qwen3-0.6b at 4 096 tokens). On hosts a thread's lanes run in order, so
// there a row is still summed left to right.
struct ShortRows {
  int lanes = 0;           // per row: a power of two >= the row's groups (0: not short)
  int rows_per_team = 0;
};
inline ShortRows short_rows(int groups) {
  if (groups > 32) return {};
  if (!kDeviceIsGpu) return {1, 1};
  int lanes = 1;
  while (lanes < groups) lanes *= 2;
  return {lanes, 256 / lanes};
}

// row_fn(team, row) for each row in [0, R), laid out as ShortRows says: rows_per_team rows a
// team, a row to a thread; row_fn spreads the row's groups over ThreadVectorRange.
template <class RowFn>
void for_short_rows(const ExecSpace& space, const char* name, int R, const ShortRows& layout, const RowFn& row_fn) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int rows = layout.rows_per_team;
  Kokkos::parallel_for(
      name, Kokkos::TeamPolicy<ExecSpace>(space, (R + rows - 1) / rows, rows, layout.lanes),
      KOKKOS_LAMBDA(const Member& team) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const int t) {
          const long row = static_cast<long>(team.league_rank()) * rows + t;
          if (row < R) row_fn(team, row);
        });
      });
}

}  // namespace detail

template <class T>
void rmsnorm_forward(const ExecSpace& space,
                     const T* x,     // (R, C)
                     const T* w,     // (C)
                     T* y,           // (R, C)
                     float* rstd,    // (R)  saved for backward
                     int R, int C, float eps) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  constexpr int W = Packed<T>::width;
  // Packs never straddle two rows: each row starts aligned and holds whole packs.
  const bool packed = packs_aligned(x, w, y) && C % W == 0;
  const int groups = (C + W - 1) / W;
  // One row's sum of squares over a group, and its output over a group, for both team layouts.
  const auto group_sq = [=] KOKKOS_FUNCTION(long base, int k, float& acc) {
    if (packed) {
      const Packed<T> xp = load_packed(x + base + k * W);
      SHARDRL_UNROLL_LANES
      for (int j = 0; j < W; ++j) {
        const float v = static_cast<float>(xp.v[j]);
        acc += v * v;
      }
    } else {
      for (int c = k * W; c < detail::rmsnorm_group_end(k, W, C); ++c) {
        const float v = static_cast<float>(x[base + c]);
        acc += v * v;
      }
    }
  };
  const auto group_y = [=] KOKKOS_FUNCTION(long base, int k, float r) {
    if (packed) {
      const Packed<T> xp = load_packed(x + base + k * W), wp = load_packed(w + k * W);
      Packed<T> yp;
      SHARDRL_UNROLL_LANES
      for (int j = 0; j < W; ++j) yp.v[j] = detail::rmsnorm_element(xp.v[j], r, wp.v[j]);
      store_packed(y + base + k * W, yp);
    } else {
      for (int c = k * W; c < detail::rmsnorm_group_end(k, W, C); ++c)
        y[base + c] = detail::rmsnorm_element(x[base + c], r, w[c]);
    }
  };
  const detail::ShortRows short_rows = detail::short_rows(groups);
  if (short_rows.lanes > 0) {
    detail::for_short_rows(
        space, "rmsnorm_forward_short_rows", R, short_rows, KOKKOS_LAMBDA(const Member& team, const long row) {
          const long base = row * C;
          float sum_sq = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, groups), [&](const int k, float& acc) { group_sq(base, k, acc); }, sum_sq);
          const float r = detail::rmsnorm_scale(sum_sq, C, eps);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, groups), [&](const int k) { group_y(base, k, r); });
          Kokkos::single(Kokkos::PerThread(team), [&]() { rstd[row] = r; });
        });
    return;
  }
  // One team per row: the sum of squares is a team reduction, so a row is read coalesced.
  Kokkos::parallel_for(
      "rmsnorm_forward", Kokkos::TeamPolicy<ExecSpace>(space, R, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const long base = static_cast<long>(team.league_rank()) * C;
        float sum_sq = 0.0f;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, groups), [&](const int k, float& acc) { group_sq(base, k, acc); }, sum_sq);
        const float r = detail::rmsnorm_scale(sum_sq, C, eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](const int k) { group_y(base, k, r); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd[team.league_rank()] = r; });
      });
}

// Scratch of the weight gradient's first stage: partial column sums over row chunks. The
// number of chunks is fixed by (R, C) alone, so the summation order (and the result) is the
// same on every device.
inline constexpr long kRmsnormDwScratch = 1L << 18;   // floats
inline int rmsnorm_dw_chunks(int R, int C) {
  const long by_scratch = kRmsnormDwScratch / (C > 0 ? C : 1);
  const long chunks = by_scratch < R ? by_scratch : R;
  return static_cast<int>(chunks > 1 ? chunks : 1);
}

// dx = beta * dx + d(loss)/dx        (beta = 1 adds into a residual-stream gradient)
// dw += sum over rows of dy * x * rstd   (fp32 gradient, accumulated)
// scratch: kRmsnormDwScratch floats of device memory (any content).
template <class T>
void rmsnorm_backward(const ExecSpace& space,
                      const T* x,          // (R, C)
                      const T* w,          // (C)
                      const float* rstd,   // (R)
                      const T* dy,         // (R, C)
                      T* dx,               // (R, C)
                      float* dw,           // (C), or nullptr: no weight gradient (a frozen weight)
                      int R, int C, float beta, float* scratch) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  constexpr int W = Packed<T>::width;
  const bool packed = packs_aligned(x, w, dy, dx) && C % W == 0;
  const int groups = (C + W - 1) / W;
  // With xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)). One row's
  // sum of g * x over a group, and its dx over a group, for both team layouts.
  const auto group_gx = [=] KOKKOS_FUNCTION(long base, int k, float& acc) {
    if (packed) {
      const long i = base + k * W;
      const Packed<T> dyp = load_packed(dy + i), wp = load_packed(w + k * W), xp = load_packed(x + i);
      SHARDRL_UNROLL_LANES
      for (int j = 0; j < W; ++j)
        acc += static_cast<float>(dyp.v[j]) * static_cast<float>(wp.v[j]) * static_cast<float>(xp.v[j]);
    } else {
      for (int c = k * W; c < detail::rmsnorm_group_end(k, W, C); ++c)
        acc += static_cast<float>(dy[base + c]) * static_cast<float>(w[c]) * static_cast<float>(x[base + c]);
    }
  };
  const auto group_dx = [=] KOKKOS_FUNCTION(long base, int k, float r, float mean_gx) {
    // beta == 0 must not read dx: a fresh buffer may hold NaN, and 0 * NaN is NaN.
    if (packed) {
      const long i = base + k * W;
      const Packed<T> dyp = load_packed(dy + i), wp = load_packed(w + k * W), xp = load_packed(x + i);
      Packed<T> dxp{};
      if (beta != 0.0f) dxp = load_packed(dx + i);
      SHARDRL_UNROLL_LANES
      for (int j = 0; j < W; ++j) {
        const float g = static_cast<float>(dyp.v[j]) * static_cast<float>(wp.v[j]);
        const float xhat = static_cast<float>(xp.v[j]) * r;
        const float d = r * (g - xhat * mean_gx);
        dxp.v[j] = beta == 0.0f ? T(d) : T(beta * static_cast<float>(dxp.v[j]) + d);
      }
      store_packed(dx + i, dxp);
    } else {
      for (int c = k * W; c < detail::rmsnorm_group_end(k, W, C); ++c) {
        const float g = static_cast<float>(dy[base + c]) * static_cast<float>(w[c]);
        const float xhat = static_cast<float>(x[base + c]) * r;
        const float d = r * (g - xhat * mean_gx);
        dx[base + c] = beta == 0.0f ? T(d) : T(beta * static_cast<float>(dx[base + c]) + d);
      }
    }
  };
  const detail::ShortRows short_rows = detail::short_rows(groups);
  if (short_rows.lanes > 0) {
    detail::for_short_rows(
        space, "rmsnorm_backward_dx_short_rows", R, short_rows, KOKKOS_LAMBDA(const Member& team, const long row) {
          const long base = row * C;
          const float r = rstd[row];
          float sum_gx = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, groups), [&](const int k, float& acc) { group_gx(base, k, acc); }, sum_gx);
          const float mean_gx = sum_gx * r / static_cast<float>(C);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, groups),
                               [&](const int k) { group_dx(base, k, r, mean_gx); });
        });
  } else {   // a team per row
    Kokkos::parallel_for(
        "rmsnorm_backward_dx", Kokkos::TeamPolicy<ExecSpace>(space, R, Kokkos::AUTO),
        KOKKOS_LAMBDA(const Member& team) {
          const long base = static_cast<long>(team.league_rank()) * C;
          const float r = rstd[team.league_rank()];
          float sum_gx = 0.0f;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, groups), [&](const int k, float& acc) { group_gx(base, k, acc); }, sum_gx);
          const float mean_gx = sum_gx * r / static_cast<float>(C);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](const int k) { group_dx(base, k, r, mean_gx); });
        });
  }
  if (dw == nullptr) return;   // a frozen weight (LoRA's base): the input gradient only
  // dw in two passes, without atomics. First, each (row chunk, column) sums its chunk's rows in
  // order: neighbouring threads take neighbouring columns (or packs of them), so the reads are
  // coalesced (one team per column, reading down a column, was 15 ms of a qwen3-0.6b step). Then
  // each column adds its chunks' sums in order. A pack's columns are summed exactly as single
  // columns are, so dw does not depend on alignment.
  const int chunks = rmsnorm_dw_chunks(R, C);
  const int rows_per_chunk = (R + chunks - 1) / chunks;
  const bool dw_packed = packs_aligned(x, dy, scratch) && C % W == 0;
  const int dw_width = dw_packed ? W : 1;
  const long columns = C / dw_width;   // columns, or packs of W columns, per chunk
  Kokkos::parallel_for(
      "rmsnorm_backward_dw_chunks", Kokkos::RangePolicy<ExecSpace>(space, 0, chunks * columns),
      KOKKOS_LAMBDA(const long i) {
        const long k = i / columns, c = (i % columns) * dw_width;
        const long first = k * rows_per_chunk;
        const long last = first + rows_per_chunk < R ? first + rows_per_chunk : R;
        if (dw_packed) {
          // The rows' loads do not depend on the sums: unrolled, several rows are in flight at once.
          Packed<float, W> sum{};
#if defined(__CUDA_ARCH__)
#pragma unroll 4
#endif
          for (long r = first; r < last; ++r) {
            const Packed<T> dyp = load_packed(dy + r * C + c), xp = load_packed(x + r * C + c);
            const float rs = rstd[r];
            SHARDRL_UNROLL_LANES
            for (int j = 0; j < W; ++j) sum.v[j] += static_cast<float>(dyp.v[j]) * static_cast<float>(xp.v[j]) * rs;
          }
          store_packed(scratch + k * C + c, sum);
        } else {
          float sum = 0.0f;
          for (long r = first; r < last; ++r)
            sum += static_cast<float>(dy[r * C + c]) * static_cast<float>(x[r * C + c]) * rstd[r];
          scratch[k * C + c] = sum;
        }
      });
  Kokkos::parallel_for(
      "rmsnorm_backward_dw", Kokkos::RangePolicy<ExecSpace>(space, 0, C), KOKKOS_LAMBDA(const int c) {
        float sum = 0.0f;
        for (int k = 0; k < chunks; ++k) sum += scratch[static_cast<long>(k) * C + c];
        dw[c] += sum;
      });
}

}  // namespace shardrl::kernels
