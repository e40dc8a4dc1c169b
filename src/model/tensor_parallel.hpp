// Tensor-parallel decoding (rollout.tensor_parallel = T): each of a group of T ranks holds 1/T of
// every decoder layer's attention heads (q, k, v rows; o columns) and MLP columns (gate, up rows;
// down columns), and the whole embedding, norms and head (tensor_parallel_shape gives the
// shape of the part). After a layer's output projection and its down projection each rank holds
// a partial sum of the residual stream, which `sum` completes across the group; everything else
// is the ordinary model on the smaller shape. The model knows only this interface;
// rollout/comm_tensor_parallel.hpp implements it over a communicator of the group.
#pragma once

#include "model/model_shape.hpp"

namespace shardrl {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: `count` elements of the compute type (bf16 when `bf16`, else fp32) become their sum
  // over the group, ordered after the work enqueued on the model's execution space and before
  // what is enqueued next. Every rank of the group calls it alike.
  virtual void sum(void* data, long count, bool bf16) = 0;
};

// The shape of one rank's part: heads, kv heads and d_ff divided by `ranks` (they must divide;
// a dense model: the config refuses mixtures of experts). Everything else as `full`.
ModelShape tensor_parallel_shape(const ModelShape& full, int ranks);

}  // namespace shardrl
