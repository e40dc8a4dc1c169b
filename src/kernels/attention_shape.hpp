// The shape of one attention call, shared by every implementation (kernels/attention.hpp,
// model/gemm_attention.hpp, kernels/flash_attention.hpp). Plain C++: the CUDA-only sources
// include it without Kokkos.
#pragma once

namespace shardrl::kernels {

struct AttentionShape {
  int B = 1;         // rows
  int S = 1;         // token slots per row (one right-padded sequence, or several packed)
  int n_heads = 1;
  int n_kv_heads = 1;
  int hd = 1;        // head dim
};

}  // namespace shardrl::kernels
