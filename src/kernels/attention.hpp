// Causal grouped-query self-attention, fused (no S x S matrix in memory): each query token
// attends to the keys of its own sequence up to and including itself. Head h uses key/value
// head h / (n_heads / n_kv_heads). Scores are scaled by 1/sqrt(hd); softmax in fp32.
//
// Tokens are laid out (B, S): B rows of S slots, token n = b * S + s. Which tokens form a
// sequence is given by `positions` (B*S int32, device memory): positions[n] is the position of
// token n inside its own sequence, so n's sequence starts at token n - positions[n] and n
// attends to keys j in [n - positions[n], n]. The caller guarantees that a sequence never
// crosses a row (0 <= positions[n] <= n % S) and that positions rise by exactly 1 per token
// within a sequence (positions[n] == positions[n-1] + 1 unless positions[n] == 0, which starts
// a new sequence). These are not checked on the device.
//  - Right padding, one sequence per row: positions[n] = n % S. Pads are just later positions
//    of the row's sequence; causality keeps real tokens from seeing them, no mask is needed.
//  - Packing, several sequences concatenated in one row: positions restart at 0 at each
//    sequence start, e.g. lengths 3, 1, 4 in a row of 8 give 0 1 2 0 0 1 2 3. Each sequence
//    sees only itself, and its results are those of running it alone (bit-identical: the
//    per-token arithmetic and its order do not depend on where in the row a sequence sits).
//    Slack at the end of a row may be one more sequence or extend the last one.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "kernels/attention_shape.hpp"

namespace shardrl::kernels {

// out(n, h, :) = sum_j softmax_j(q(n,h,:) . k(j,g,:) / sqrt(hd)) v(j,g,:), j in n's sequence
// up to n; lse(n, h) = logsumexp_j of the scaled scores (saved for backward)
template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& s,
                       const std::int32_t* positions,  // (B*S): position of each token in its sequence
                       const T* q,    // (B*S, n_heads, hd)
                       const T* k,    // (B*S, n_kv_heads, hd)
                       const T* v,    // (B*S, n_kv_heads, hd)
                       T* out,        // (B*S, n_heads, hd)
                       float* lse);   // (B*S, n_heads)

// Gradients of the loss wrt q, k, v given dout; written (not accumulated). Deterministic:
// no atomics (dk, dv of a kv head sum over its query heads and positions in one thread/team).
template <class T>
void attention_backward(const ExecSpace& space, const AttentionShape& s,
                        const std::int32_t* positions,        // as in forward
                        const T* q, const T* k, const T* v,   // as in forward
                        const T* out, const float* lse,       // from forward
                        const T* dout,                        // (B*S, n_heads, hd)
                        T* dq,                                // (B*S, n_heads, hd)
                        T* dk, T* dv);                        // (B*S, n_kv_heads, hd)

// ---------------------------------------------------------------------------------------------
// Definitions. One thread per (token, head) row: each thread walks its keys once, so memory is
// linear in the sequence length. Row accumulators live in fixed-size per-thread arrays, which
// bounds the head dimension (checked on the host before launch).

namespace detail {

inline constexpr int kAttentionMaxHeadDim = 256;

template <class T>
KOKKOS_INLINE_FUNCTION float attention_dot(const T* a, const T* b, int n) {
  float acc = 0.0f;
  for (int d = 0; d < n; ++d) acc += static_cast<float>(a[d]) * static_cast<float>(b[d]);
  return acc;
}

inline void attention_check_shape(const AttentionShape& s, const std::int32_t* positions) {
  SHARDRL_CHECK(s.B >= 1 && s.S >= 1, "attention needs B >= 1 and S >= 1");
  SHARDRL_CHECK(positions != nullptr, "attention needs the per-token positions array");
  SHARDRL_CHECK(s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0,
                "n_heads " + std::to_string(s.n_heads) + " is not a multiple of n_kv_heads " +
                    std::to_string(s.n_kv_heads));
  SHARDRL_CHECK(s.hd >= 1 && s.hd <= kAttentionMaxHeadDim,
                "head dim " + std::to_string(s.hd) + " outside [1, " +
                    std::to_string(kAttentionMaxHeadDim) + "]");
}

}  // namespace detail

template <class T>
void attention_forward(const ExecSpace& space, const AttentionShape& s,
                       const std::int32_t* positions, const T* q, const T* k, const T* v, T* out,
                       float* lse) {
  detail::attention_check_shape(s, positions);
  const int H = s.n_heads, G = s.n_kv_heads, hd = s.hd;
  const int group = H / G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const long rows = static_cast<long>(s.B) * s.S * H;
  Kokkos::parallel_for(
      "attention_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), KOKKOS_LAMBDA(const long r) {
        const long n = r / H;
        const int g = static_cast<int>(r % H) / group;
        const long first = n - positions[n];  // first token of n's sequence
        const T* qr = q + r * hd;
        float acc[detail::kAttentionMaxHeadDim];
        for (int d = 0; d < hd; ++d) acc[d] = 0.0f;
        // Online softmax: m is the running max, l the running sum of exp(score - m); acc is
        // rescaled whenever m grows so nothing overflows and no score is stored.
        float m = -INFINITY, l = 0.0f;
        for (long j = first; j <= n; ++j) {
          const T* kr = k + (j * G + g) * hd;
          const T* vr = v + (j * G + g) * hd;
          const float sc = scale * detail::attention_dot(qr, kr, hd);
          if (sc > m) {
            const float c = expf(m - sc);
            l *= c;
            for (int d = 0; d < hd; ++d) acc[d] *= c;
            m = sc;
          }
          const float p = expf(sc - m);
          l += p;
          for (int d = 0; d < hd; ++d) acc[d] += p * static_cast<float>(vr[d]);
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; ++d) out[r * hd + d] = T(acc[d] * inv);
        lse[r] = m + logf(l);
      });
}

template <class T>
void attention_backward(const ExecSpace& space, const AttentionShape& s,
                        const std::int32_t* positions, const T* q, const T* k, const T* v,
                        const T* out, const float* lse, const T* dout, T* dq, T* dk, T* dv) {
  detail::attention_check_shape(s, positions);
  const int S = s.S, H = s.n_heads, G = s.n_kv_heads, hd = s.hd;
  const int group = H / G;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const long tokens = static_cast<long>(s.B) * S;

  // dq: one thread per (token i, head h) over the keys j <= i of its sequence. P is recomputed
  // from the saved lse; D_i = dout_i . out_i equals sum_j P_ij dP_ij, so no S x S matrix.
  Kokkos::parallel_for(
      "attention_backward_dq", Kokkos::RangePolicy<ExecSpace>(space, 0, tokens * H),
      KOKKOS_LAMBDA(const long r) {
        const long i = r / H;
        const int g = static_cast<int>(r % H) / group;
        const long first = i - positions[i];  // first token of i's sequence
        const T* qr = q + r * hd;
        const T* dor = dout + r * hd;
        const float D = detail::attention_dot(dor, out + r * hd, hd);
        const float lse_i = lse[r];
        float acc[detail::kAttentionMaxHeadDim];
        for (int d = 0; d < hd; ++d) acc[d] = 0.0f;
        for (long j = first; j <= i; ++j) {
          const T* kr = k + (j * G + g) * hd;
          const T* vr = v + (j * G + g) * hd;
          const float p = expf(scale * detail::attention_dot(qr, kr, hd) - lse_i);
          const float ds = p * (detail::attention_dot(dor, vr, hd) - D);
          for (int d = 0; d < hd; ++d) acc[d] += ds * static_cast<float>(kr[d]);
        }
        for (int d = 0; d < hd; ++d) dq[r * hd + d] = T(scale * acc[d]);
      });

  // dk, dv: one thread per (token j, kv head g) sums over the query heads of group g and the
  // query positions i >= j of the same sequence, in a fixed order: deterministic, no atomics.
  // D_i is recomputed per (i, h) rather than stored, since the kernel may not allocate.
  // j's sequence runs on while i stays in j's row and positions[i] == positions[j] + (i - j).
  Kokkos::parallel_for(
      "attention_backward_dkdv", Kokkos::RangePolicy<ExecSpace>(space, 0, tokens * G),
      KOKKOS_LAMBDA(const long c) {
        const long j = c / G;
        const int g = static_cast<int>(c % G);
        const long row_last = j - j % S + S - 1;  // last token of j's row
        const long pj = positions[j];
        long last = j;  // last token of j's sequence
        while (last < row_last && positions[last + 1] == pj + (last + 1 - j)) ++last;
        const T* kr = k + c * hd;
        const T* vr = v + c * hd;
        float dk_acc[detail::kAttentionMaxHeadDim];
        float dv_acc[detail::kAttentionMaxHeadDim];
        for (int d = 0; d < hd; ++d) {
          dk_acc[d] = 0.0f;
          dv_acc[d] = 0.0f;
        }
        for (int h = g * group; h < (g + 1) * group; ++h) {
          for (long i = j; i <= last; ++i) {
            const long r = i * H + h;
            const T* qr = q + r * hd;
            const T* dor = dout + r * hd;
            const float D = detail::attention_dot(dor, out + r * hd, hd);
            const float p = expf(scale * detail::attention_dot(qr, kr, hd) - lse[r]);
            const float ds = p * (detail::attention_dot(dor, vr, hd) - D);
            for (int d = 0; d < hd; ++d) {
              dk_acc[d] += ds * static_cast<float>(qr[d]);
              dv_acc[d] += p * static_cast<float>(dor[d]);
            }
          }
        }
        for (int d = 0; d < hd; ++d) {
          dk[c * hd + d] = T(scale * dk_acc[d]);
          dv[c * hd + d] = T(dv_acc[d]);
        }
      });
}

}  // namespace shardrl::kernels
