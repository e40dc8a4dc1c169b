// A model shape's RoPE fields as the rotation kernel takes them (kernels/rope.hpp).
#pragma once

#include "kernels/rope.hpp"
#include "model/model_shape.hpp"

namespace shardrl {

inline kernels::RopeFrequencies rope_frequencies(const ModelShape& s) {
  kernels::RopeFrequencies f;
  f.theta = s.rope_theta;
  f.scaling_factor = s.rope_scaling_factor;
  f.low_freq_factor = s.rope_low_freq_factor;
  f.high_freq_factor = s.rope_high_freq_factor;
  f.original_max_position = static_cast<float>(s.rope_original_max_position);
  return f;
}

}  // namespace shardrl
