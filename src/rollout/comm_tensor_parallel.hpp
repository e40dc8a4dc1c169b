// The model's TensorParallelGroup over a communicator of the group's ranks (the job splits the
// world into groups of rollout.tensor_parallel consecutive ranks): an in-place all-reduce on the
// model's stream, so a decode step captured as a CUDA graph captures it too.
#pragma once

#include "core/kokkos.hpp"
#include "model/tensor_parallel.hpp"
#include "mpi/communicator.hpp"

namespace shardrl {

class CommTensorParallel final : public TensorParallelGroup {
 public:
  CommTensorParallel(Communicator& group, const ExecSpace& space) : comm_(group), space_(space) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void sum(void* data, long count, bool bf16) override;
  // The group's host communicator, for agreements between its ranks' decode steps.
  MPI_Comm host_comm() const { return comm_.host_comm(); }

 private:
  Communicator& comm_;
  ExecSpace space_;
};

}  // namespace shardrl
