// AdamW on flat fp32 buffers (a unit's own slice under FSDP): decoupled weight decay, bias
// correction, fp32 state. One kernel per update, on the device.
#pragma once

#include "core/kokkos.hpp"

namespace shardrl {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// For i < n: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   w -= lr * (m / (1 - b1^step) / (sqrt(v / (1 - b2^step)) + eps) + weight_decay * w)
// `step` counts from 1.
inline void adamw_update(const ExecSpace& space, float* w, const float* g, float* m, float* v, long n,
                         const AdamWHyper& h, long step) {
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps, lr = h.lr, wd = h.weight_decay;
  const float c1 = 1.0f - powf(b1, static_cast<float>(step));
  const float c2 = 1.0f - powf(b2, static_cast<float>(step));
  Kokkos::parallel_for(
      "adamw_update", Kokkos::RangePolicy<ExecSpace>(space, 0, n), KOKKOS_LAMBDA(const long i) {
        const float gi = g[i];
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * w[i]);
      });
}

}  // namespace shardrl
