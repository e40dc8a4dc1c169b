// AdamW: the element update that every AdamW kernel in shardrl calls (Optimizer::update and the
// plain adamw_update below), so the two can never drift apart; and adamw_update itself, AdamW on
// flat fp32 buffers with host-side constants (decoupled weight decay, bias correction, fp32
// state), one kernel per update, on the device.
#pragma once

#include <cmath>

#include "core/kokkos.hpp"

namespace shardrl {

// The constants of one AdamW step. c1, c2 are the bias corrections 1 - beta1^step, 1 - beta2^step.
struct AdamWStepConstants {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float c1;
  float c2;
};

// One element, in fp32: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   w -= lr * ((m / c1) / (sqrt(v / c2) + eps) + weight_decay * w)
// The state type S (float or bf16) is read as float and rounded on store; w is updated from this
// step's fp32 m and v, before that rounding.
template <class S>
KOKKOS_INLINE_FUNCTION void adamw_element(float& w, float g, S& m, S& v, const AdamWStepConstants& k) {
  const float mi = k.beta1 * static_cast<float>(m) + (1.0f - k.beta1) * g;
  const float vi = k.beta2 * static_cast<float>(v) + (1.0f - k.beta2) * g * g;
  m = S(mi);
  v = S(vi);
  w -= k.lr * ((mi / k.c1) / (sqrtf(vi / k.c2) + k.eps) + k.weight_decay * w);
}

// 1 - beta^step, on the host in fp64 (1 - beta^step cancels badly in fp32 for beta near 1).
inline float adamw_bias_correction(float beta, double step) {
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), step));
}

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
// Defined in optimizer.cpp: a device lambda in an inline function compiled into several
// translation units is an ODR hazard under nvcc.
void adamw_update(const ExecSpace& space, float* w, const float* g, float* m, float* v, long n,
                  const AdamWHyper& h, long step);

}  // namespace shardrl
