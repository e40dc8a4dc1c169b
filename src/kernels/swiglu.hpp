// SwiGLU activation of the MLP: a = silu(g) * u, silu(g) = g * sigmoid(g), in fp32.
#pragma once

#include <cmath>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"

namespace shardrl::kernels {

template <class T>
void swiglu_forward(const ExecSpace& space,
                    const T* g,   // (N, F)
                    const T* u,   // (N, F)
                    T* a,         // (N, F)
                    long count) { // N * F
  Kokkos::parallel_for(
      "swiglu_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const float gv = static_cast<float>(g[i]);
        // expf(-g) overflows to inf for very negative g, which gives sigmoid 0: the right limit.
        const float sig = 1.0f / (1.0f + expf(-gv));
        a[i] = T(gv * sig * static_cast<float>(u[i]));
      });
}

// dg = da * u * silu'(g),  du = da * silu(g)      (both written, not accumulated)
template <class T>
void swiglu_backward(const ExecSpace& space,
                     const T* g, const T* u,   // (N, F)
                     const T* da,              // (N, F)
                     T* dg, T* du,             // (N, F)
                     long count) {
  Kokkos::parallel_for(
      "swiglu_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, count), KOKKOS_LAMBDA(const long i) {
        const float gv = static_cast<float>(g[i]);
        const float dav = static_cast<float>(da[i]);
        const float sig = 1.0f / (1.0f + expf(-gv));
        // silu'(g) = sig * (1 + g * (1 - sig))
        dg[i] = T(dav * static_cast<float>(u[i]) * sig * (1.0f + gv * (1.0f - sig)));
        du[i] = T(dav * gv * sig);
      });
}

}  // namespace shardrl::kernels
