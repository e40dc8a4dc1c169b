// The learning-rate schedule after the warm-up: constant, or cosine down to min_lr_ratio * lr.
#pragma once

namespace shardrl {

enum class LrSchedule { constant, cosine };

}  // namespace shardrl
