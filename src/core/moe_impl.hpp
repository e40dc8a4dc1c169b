// How an MoE layer runs its experts' GEMMs: all experts in one grouped call per matrix, or one
// expert at a time. Both read the experts from the layer's one gathered unit.
#pragma once

namespace shardrl {

enum class MoeImpl { grouped, loop };

}  // namespace shardrl
