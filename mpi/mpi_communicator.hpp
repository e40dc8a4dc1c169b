// The MPI backend: host buffers, nonblocking MPI collectives completed by polling, so that a
// collective that a peer never joins aborts the job after the timeout instead of hanging.
#pragma once

#include "mpi/communicator.hpp"
#include "mpi/layout.hpp"

namespace shardrl {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, double timeout_s);   // duplicates `comm`
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }
  MPI_Comm host_comm() const override { return comm_.get(); }

  void all_gather(const void* send, void* recv, std::size_t count, DataType type, StreamRef) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                      StreamRef) override;
  void all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                  StreamRef) override;
  void broadcast(void* buffer, std::size_t count, DataType type, int root, StreamRef) override;
  void all_to_all_v(const void* send, const std::size_t* send_counts, const std::size_t* send_offsets, void* recv,
                    const std::size_t* recv_counts, const std::size_t* recv_offsets, DataType type,
                    StreamRef s) override;
  void barrier() override;
  void synchronize(StreamRef) override {}   // every call above completes before returning

 private:
  void wait(MPI_Request& request, const char* what);
  void divide_by_size(void* data, std::size_t count, DataType type) const;

  MpiComm comm_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_max_ = MPI_OP_NULL;
};

}  // namespace shardrl
