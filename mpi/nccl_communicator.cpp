#include "mpi/nccl_communicator.hpp"

#include <sched.h>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/nccl_check.hpp"

namespace shardrl {
namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::bf16: return ncclBfloat16;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
    case DataType::u8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::average: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

}  // namespace

void fail_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  fatal(std::string(call) + " failed: " + ncclGetErrorString(status) + " (" +
            ncclGetLastError(nullptr) + ")",
        file, line);
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    if (comm_) ncclCommDestroy(comm_);
    comm_ = other.comm_;
    other.comm_ = nullptr;
  }
  return *this;
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm, &size_));
  MPI_Comm dup = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_dup(comm, &dup));
  host_comm_ = MpiComm(dup);
  ncclUniqueId id;
  if (rank_ == 0) SHARDRL_CHECK_NCCL(ncclGetUniqueId(&id));
  SHARDRL_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  // Non-blocking: no NCCL call may block the host unboundedly (the first collective connects
  // lazily and would otherwise wait forever for a peer that never comes).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t raw = nullptr;
  ncclResult_t init = ncclCommInitRankConfig(&raw, size_, id, rank_, &config);
  comm_ = NcclComm(raw);
  settle(init, "ncclCommInitRankConfig");
  barrier_word_ = CudaBuffer(MemoryCategory::workspace, sizeof(float));
}

NcclCommunicator::~NcclCommunicator() = default;

std::int64_t NcclCommunicator::device_bytes_outside_kokkos() const {
  return static_cast<std::int64_t>(barrier_word_.bytes());
}

cudaStream_t NcclCommunicator::stream(StreamRef s) const {
  return s.handle ? static_cast<cudaStream_t>(s.handle) : own_stream_.get();
}

void NcclCommunicator::fail_and_abort(const std::string& what, const char* file, int line) {
  // No ncclCommAbort first: with kernels still waiting on a dead peer it can block, and then
  // the message below would never be printed. fatal() ends every process of the job through
  // MPI_Abort, which also ends their kernels.
  fatal(what, file, line);
}

void NcclCommunicator::settle(ncclResult_t result, const char* call) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  for (long polls = 0; result == ncclInProgress; ++polls) {
    if (polls > 1000) sched_yield();
    if ((polls & 1023) == 0 &&
        std::chrono::duration<double>(clock::now() - start).count() > timeout_s_)
      fail_and_abort(fmt::format("{} did not complete within comm.timeout_s = {} s: a peer rank failed "
                                 "or is not taking part",
                                 call, timeout_s_),
                     __FILE__, __LINE__);
    SHARDRL_CHECK_NCCL(ncclCommGetAsyncError(comm_.get(), &result));
  }
  if (result != ncclSuccess)
    fail_and_abort(fmt::format("{} failed: {} ({})", call, ncclGetErrorString(result), ncclGetLastError(comm_.get())),
                   __FILE__, __LINE__);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t count, DataType type,
                                  StreamRef s) {
  settle(ncclAllGather(send, recv, count, nccl_type(type), comm_.get(), stream(s)), "ncclAllGather");
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                      ReduceOp op, StreamRef s) {
  settle(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), comm_.get(), stream(s)),
         "ncclReduceScatter");
}

void NcclCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DataType type,
                                  ReduceOp op, StreamRef s) {
  settle(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), comm_.get(), stream(s)), "ncclAllReduce");
}

void NcclCommunicator::broadcast(void* buffer, std::size_t count, DataType type, int root, StreamRef s) {
  settle(ncclBroadcast(buffer, buffer, count, nccl_type(type), root, comm_.get(), stream(s)), "ncclBroadcast");
}

void NcclCommunicator::all_to_all_v(const void* send, const std::size_t* send_counts, const std::size_t* send_offsets,
                                    void* recv, const std::size_t* recv_counts, const std::size_t* recv_offsets,
                                    DataType type, StreamRef s) {
  const std::size_t bytes = size_of(type);
  const cudaStream_t st = stream(s);
  // Point-to-point calls inside a group are only queued; the group's end launches them (in
  // non-blocking mode it may return ncclInProgress, which settle() waits out within the timeout).
  auto queued = [&](ncclResult_t r, const char* call) {
    if (r != ncclSuccess && r != ncclInProgress)
      fail_and_abort(fmt::format("{} failed: {} ({})", call, ncclGetErrorString(r), ncclGetLastError(comm_.get())),
                     __FILE__, __LINE__);
  };
  queued(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < size_; ++p) {
    if (send_counts[p] > 0)
      queued(ncclSend(static_cast<const char*>(send) + send_offsets[p] * bytes, send_counts[p], nccl_type(type), p,
                      comm_.get(), st),
             "ncclSend");
    if (recv_counts[p] > 0)
      queued(ncclRecv(static_cast<char*>(recv) + recv_offsets[p] * bytes, recv_counts[p], nccl_type(type), p,
                      comm_.get(), st),
             "ncclRecv");
  }
  settle(ncclGroupEnd(), "ncclGroupEnd (all-to-all)");
}

void NcclCommunicator::barrier() {
  // A one-element all-reduce on our own stream, then a bounded wait: a device-side barrier.
  settle(ncclAllReduce(barrier_word_.data(), barrier_word_.data(), 1, ncclFloat32, ncclSum, comm_.get(),
                       own_stream_.get()),
         "ncclAllReduce (barrier)");
  synchronize(StreamRef{});
}

void NcclCommunicator::synchronize(StreamRef s) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  cudaStream_t st = stream(s);
  for (long polls = 0;; ++polls) {
    cudaError_t q = cudaStreamQuery(st);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) SHARDRL_CHECK_CUDA(q);
    ncclResult_t async = ncclSuccess;
    SHARDRL_CHECK_NCCL(ncclCommGetAsyncError(comm_.get(), &async));
    if (async != ncclSuccess && async != ncclInProgress)
      fail_and_abort(fmt::format("NCCL reported an asynchronous error: {} (a peer rank failed or the "
                                 "network broke)", ncclGetErrorString(async)),
                     __FILE__, __LINE__);
    if (polls > 1000) sched_yield();
    if ((polls & 1023) == 0 &&
        std::chrono::duration<double>(clock::now() - start).count() > timeout_s_)
      fail_and_abort(fmt::format("NCCL collectives did not complete within comm.timeout_s = {} s: a "
                                 "peer rank failed or is not taking part",
                                 timeout_s_),
                     __FILE__, __LINE__);
  }
}

}  // namespace shardrl
