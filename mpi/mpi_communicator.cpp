#include "mpi/mpi_communicator.hpp"

#include <climits>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polled_wait.hpp"

namespace shardrl {
namespace {

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::f32: return MPI_FLOAT;
    case DataType::f64: return MPI_DOUBLE;
    case DataType::bf16: return MPI_UINT16_T;   // reduced by the bf16 ops below
    case DataType::i32: return MPI_INT32_T;
    case DataType::i64: return MPI_INT64_T;
    case DataType::u8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// bf16 reductions add in fp32 and round once per pair, as NCCL's bf16 reductions do.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i)
    if (static_cast<float>(a[i]) > static_cast<float>(b[i])) b[i] = a[i];
}

int checked_count(std::size_t count) {
  if (count > static_cast<std::size_t>(INT_MAX))
    SHARDRL_FATAL(fmt::format("MPI collective of {} elements exceeds MPI's int count limit", count));
  return static_cast<int>(count);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
  MPI_Comm dup = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_dup(comm, &dup));   // our traffic never matches the caller's
  comm_ = MpiComm(dup);
  SHARDRL_CHECK_MPI(MPI_Comm_rank(dup, &rank_));
  SHARDRL_CHECK_MPI(MPI_Comm_size(dup, &size_));
  SHARDRL_CHECK_MPI(MPI_Op_create(&bf16_sum, /*commute=*/1, &bf16_sum_));
  SHARDRL_CHECK_MPI(MPI_Op_create(&bf16_max, /*commute=*/1, &bf16_max_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  if (bf16_max_ != MPI_OP_NULL) MPI_Op_free(&bf16_max_);
}

void MpiCommunicator::wait(MPI_Request& request, const char* what) { wait_polled(request, timeout_s_, what); }

void MpiCommunicator::divide_by_size(void* data, std::size_t count, DataType type) const {
  switch (type) {
    case DataType::f32: {
      auto* p = static_cast<float*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(size_);
      break;
    }
    case DataType::f64: {
      auto* p = static_cast<double*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] /= size_;
      break;
    }
    case DataType::bf16: {
      auto* p = static_cast<bf16*>(data);
      for (std::size_t i = 0; i < count; ++i) p[i] = bf16(static_cast<float>(p[i]) / static_cast<float>(size_));
      break;
    }
    default:
      SHARDRL_FATAL(fmt::format("ReduceOp::average is not defined for {}", name_of(type)));
  }
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t count, DataType type,
                                 StreamRef) {
  const std::size_t bytes = count * size_of(type);
  const void* src = (send == static_cast<const char*>(recv) + rank_ * bytes) ? MPI_IN_PLACE : send;
  MPI_Request req;
  SHARDRL_CHECK_MPI(MPI_Iallgather(src, checked_count(count), mpi_type(type), recv,
                                   checked_count(count), mpi_type(type), comm_.get(), &req));
  wait(req, "MPI all_gather");
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                     ReduceOp op, StreamRef) {
  MPI_Op mop = op == ReduceOp::max ? (type == DataType::bf16 ? bf16_max_ : MPI_MAX)
                                   : (type == DataType::bf16 ? bf16_sum_ : MPI_SUM);
  const std::size_t bytes = count * size_of(type);
  // NCCL's in-place form (recv inside send) has no MPI equivalent: read from a copy.
  std::vector<char> copy;
  const char* s = static_cast<const char*>(send);
  const char* r = static_cast<const char*>(recv);
  if (count > 0 && r < s + bytes * size_ && s < r + bytes) {
    copy.assign(s, s + bytes * size_);
    send = copy.data();
  }
  MPI_Request req;
  SHARDRL_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, checked_count(count), mpi_type(type), mop,
                                              comm_.get(), &req));
  wait(req, "MPI reduce_scatter");
  if (op == ReduceOp::average) divide_by_size(recv, count, type);
}

void MpiCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                 ReduceOp op, StreamRef) {
  MPI_Op mop = op == ReduceOp::max ? (type == DataType::bf16 ? bf16_max_ : MPI_MAX)
                                   : (type == DataType::bf16 ? bf16_sum_ : MPI_SUM);
  MPI_Request req;
  SHARDRL_CHECK_MPI(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, checked_count(count),
                                   mpi_type(type), mop, comm_.get(), &req));
  wait(req, "MPI all_reduce");
  if (op == ReduceOp::average) divide_by_size(recv, count, type);
}

void MpiCommunicator::broadcast(void* buffer, std::size_t count, DataType type, int root, StreamRef) {
  MPI_Request req;
  SHARDRL_CHECK_MPI(MPI_Ibcast(buffer, checked_count(count), mpi_type(type), root, comm_.get(), &req));
  wait(req, "MPI broadcast");
}

void MpiCommunicator::all_to_all_v(const void* send, const std::size_t* send_counts, const std::size_t* send_offsets,
                                   void* recv, const std::size_t* recv_counts, const std::size_t* recv_offsets,
                                   DataType type, StreamRef) {
  std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
  for (int p = 0; p < size_; ++p) {
    sc[p] = checked_count(send_counts[p]);
    sd[p] = checked_count(send_offsets[p]);
    rc[p] = checked_count(recv_counts[p]);
    rd[p] = checked_count(recv_offsets[p]);
  }
  MPI_Request req;
  SHARDRL_CHECK_MPI(MPI_Ialltoallv(send, sc.data(), sd.data(), mpi_type(type), recv, rc.data(), rd.data(),
                                   mpi_type(type), comm_.get(), &req));
  wait(req, "MPI all_to_all_v");
}

void MpiCommunicator::barrier() {
  MPI_Request req;
  SHARDRL_CHECK_MPI(MPI_Ibarrier(comm_.get(), &req));
  wait(req, "MPI barrier");
}

}  // namespace shardrl
