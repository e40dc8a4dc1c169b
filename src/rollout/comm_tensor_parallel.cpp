#include "rollout/comm_tensor_parallel.hpp"

namespace shardrl {

void CommTensorParallel::sum(void* data, long count, bool bf16) {
  // The MPI backend reads host memory at once: what the space computed must be there.
  if (!kDeviceIsGpu) space_.fence();
  comm_.all_reduce(data, data, static_cast<std::size_t>(count), bf16 ? DataType::bf16 : DataType::f32, ReduceOp::sum,
                   stream_of(space_));
}

}  // namespace shardrl
