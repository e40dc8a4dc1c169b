// SwiGLU activation of the MLP: a = silu(g) * u, silu(g) = g * sigmoid(g), in fp32.
// Both kernels move 16-byte packs (kernels/packed.hpp) where the pointers allow; each element's
// arithmetic is the same in a pack and alone, so the results do not depend on alignment.
#pragma once

#include <cmath>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/packed.hpp"
#include "kernels/swiglu_math.hpp"

namespace shardrl::kernels {

namespace detail {

// One element of the forward. The backward recomputes a through this same function, so that a
// recomputed activation has the forward's bits.
template <class T>
KOKKOS_INLINE_FUNCTION T swiglu_activation(T g, T u) {
  return T(swiglu_math::activation(static_cast<float>(g), static_cast<float>(u)));
}

// One element of the backward: dg = da * u * silu'(g), du = da * silu(g).
template <class T>
KOKKOS_INLINE_FUNCTION void swiglu_gradients(T g, T u, T da, T& dg, T& du) {
  const float gv = static_cast<float>(g);
  const float dav = static_cast<float>(da);
  const float sig = swiglu_math::sigmoid(gv);
  // silu'(g) = sig * (1 + g * (1 - sig))
  dg = T(dav * static_cast<float>(u) * sig * (1.0f + gv * (1.0f - sig)));
  du = T(dav * gv * sig);
}

// A pack of the forward's activations, element by element through swiglu_activation.
template <class T>
KOKKOS_INLINE_FUNCTION Packed<T> swiglu_activation_pack(const Packed<T>& g, const Packed<T>& u) {
  Packed<T> a;
  SHARDRL_UNROLL_LANES
  for (int k = 0; k < Packed<T>::width; ++k) a.v[k] = swiglu_activation(g.v[k], u.v[k]);
  return a;
}

}  // namespace detail

template <class T>
void swiglu_forward(const ExecSpace& space,
                    const T* g,   // (N, F)
                    const T* u,   // (N, F)
                    T* a,         // (N, F)
                    long count) { // N * F
  constexpr int W = Packed<T>::width;
  const PackedRange range = packed_range<T>(count, packs_aligned(g, u, a));
  Kokkos::parallel_for(
      "swiglu_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, range.items), KOKKOS_LAMBDA(const long item) {
        if (item < range.packs) {
          const long i = item * W;
          store_packed(a + i, detail::swiglu_activation_pack(load_packed(g + i), load_packed(u + i)));
        } else {
          const long i = range.tail_element(item);
          a[i] = detail::swiglu_activation(g[i], u[i]);
        }
      });
}

// The same activation from one product's rows of (g | u): a(r, j) = silu(gu(r, j)) * gu(r, F + j),
// for a decode step whose gate and up ran as one GEMM. Packs where F and the pointers allow.
template <class T>
void swiglu_forward_rows(const ExecSpace& space,
                         const T* gu,   // (rows, 2F)
                         T* a,          // (rows, F)
                         long rows, long F) {
  constexpr int W = Packed<T>::width;
  const bool packed = F % W == 0 && packs_aligned(gu, a);
  const long per_row = packed ? F / W : F;
  Kokkos::parallel_for(
      "swiglu_forward_rows", Kokkos::RangePolicy<ExecSpace>(space, 0, rows * per_row), KOKKOS_LAMBDA(const long item) {
        const long r = item / per_row;
        if (packed) {
          const long j = (item % per_row) * W;
          store_packed(a + r * F + j,
                       detail::swiglu_activation_pack(load_packed(gu + r * 2 * F + j), load_packed(gu + r * 2 * F + F + j)));
        } else {
          const long j = item % per_row;
          a[r * F + j] = detail::swiglu_activation(gu[r * 2 * F + j], gu[r * 2 * F + F + j]);
        }
      });
}

// dg = da * u * silu'(g),  du = da * silu(g)      (both written, not accumulated)
// a, when given, is written with the forward's activation silu(g) * u, bit for bit as
// swiglu_forward writes it: the backward reads g and u anyway, so the model need not keep a.
template <class T>
void swiglu_backward(const ExecSpace& space,
                     const T* g, const T* u,   // (N, F)
                     const T* da,              // (N, F)
                     T* dg, T* du,             // (N, F)
                     long count,
                     T* a = nullptr) {         // (N, F) or nullptr
  constexpr int W = Packed<T>::width;
  const bool with_a = a != nullptr;
  const bool aligned = packs_aligned(g, u, da, dg, du) && (!with_a || packs_aligned(a));
  const PackedRange range = packed_range<T>(count, aligned);
  Kokkos::parallel_for(
      "swiglu_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, range.items), KOKKOS_LAMBDA(const long item) {
        if (item < range.packs) {
          const long i = item * W;
          const Packed<T> gp = load_packed(g + i), up = load_packed(u + i), dap = load_packed(da + i);
          Packed<T> dgp, dup;
          SHARDRL_UNROLL_LANES
          for (int k = 0; k < W; ++k) detail::swiglu_gradients(gp.v[k], up.v[k], dap.v[k], dgp.v[k], dup.v[k]);
          store_packed(dg + i, dgp);
          store_packed(du + i, dup);
          if (with_a) store_packed(a + i, detail::swiglu_activation_pack(gp, up));
        } else {
          // Reads its inputs before it writes, as a pack does, so outputs may overwrite inputs.
          const long i = range.tail_element(item);
          const T gi = g[i], ui = u[i];
          T dgi, dui;
          detail::swiglu_gradients(gi, ui, da[i], dgi, dui);
          dg[i] = dgi;
          du[i] = dui;
          if (with_a) a[i] = detail::swiglu_activation(gi, ui);
        }
      });
}

}  // namespace shardrl::kernels
