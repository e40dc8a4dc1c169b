#include "fsdp/comm_expert_exchange.hpp"

#include <vector>

#include "core/error.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {

CommExpertExchange::CommExpertExchange(Communicator& comm, const ExecSpace& space) : comm_(comm), space_(space) {}

// The counts are host integers (the routing was copied to the host to build them): one
// MPI_Alltoall on the host communicator, not a round trip through the device and the stream.
void CommExpertExchange::exchange_counts(const std::int32_t* send, std::int32_t* recv, int per) {
  SHARDRL_CHECK_MPI(MPI_Alltoall(send, per, MPI_INT32_T, recv, per, MPI_INT32_T, comm_.host_comm()));
}

void CommExpertExchange::exchange_rows(const void* send, const std::size_t* send_rows, const std::size_t* send_first,
                                       void* recv, const std::size_t* recv_rows, const std::size_t* recv_first,
                                       int width, bool bf16) {
  const std::size_t W = static_cast<std::size_t>(comm_.size()), w = static_cast<std::size_t>(width);
  std::vector<std::size_t> sc(W), so(W), rc(W), ro(W);
  for (std::size_t q = 0; q < W; ++q) {
    sc[q] = send_rows[q] * w;
    so[q] = send_first[q] * w;
    rc[q] = recv_rows[q] * w;
    ro[q] = recv_first[q] * w;
  }
  // The MPI backend reads host memory at once: what the space computed must be there.
  if (!kDeviceIsGpu) space_.fence();
  comm_.all_to_all_v(send, sc.data(), so.data(), recv, rc.data(), ro.data(), bf16 ? DataType::bf16 : DataType::f32,
                     stream_of(space_));
}

// On the host communicator: the values are host integers, and the exchange's device traffic of the
// step is done (the decode step reads its draws back before the next agreement).
void CommExpertExchange::agree_max(std::int32_t* values, int n) {
  SHARDRL_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT32_T, MPI_MAX, comm_.host_comm()));
}

}  // namespace shardrl
