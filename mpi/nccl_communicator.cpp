#include "mpi/nccl_communicator.hpp"

#include <sched.h>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include <cuda.h>   // cuMemGetAddressRange: what ncclMemAlloc holds

#include "core/cuda_check.hpp"
#include "core/error.hpp"
#include "core/running_time.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/nccl_check.hpp"
#include "mpi/polled_wait.hpp"

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

// Collective over host_comm: a communicator of its ranks with `cta_policy` (-1: NCCL's default).
// The main one is non-blocking: no NCCL call may block the host unboundedly (the first
// collective connects lazily and would otherwise wait forever for a peer that never comes). The
// copy-engine one blocks: on a non-blocking communicator NCCL 2.28's window registration returns
// ncclSuccess while it still runs (its group job sets the communicator's state to in progress
// afterwards), and the next call failed with "Attempt to use communicator before the previous
// operation returned ncclSuccess" (2 x H200, 2026-11-27). Its blocking set-up calls start only
// once every rank is there (meet), so a rank that never comes stops the job, not hangs it.
NcclComm NcclCommunicator::make_comm(int cta_policy, bool blocking) {
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 28, 0)
  (void)cta_policy;
#endif
  if (blocking) meet("ncclCommInitRankConfig (copy engines)");
  ncclUniqueId id;
  if (rank_ == 0) SHARDRL_CHECK_NCCL(ncclGetUniqueId(&id));
  SHARDRL_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, host_comm_.get()));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  if (cta_policy >= 0) config.CTAPolicy = cta_policy;
#endif
  ncclComm_t raw = nullptr;
  ncclResult_t init = ncclCommInitRankConfig(&raw, size_, id, rank_, &config);
  if (init != ncclSuccess && init != ncclInProgress)   // no communicator to ask for its error
    fail_and_abort(fmt::format("ncclCommInitRankConfig failed: {} ({})", ncclGetErrorString(init),
                               ncclGetLastError(raw)),
                   __FILE__, __LINE__);
  NcclComm made(raw);
  settle(init, "ncclCommInitRankConfig", raw);
  return made;
}

void NcclCommunicator::meet(const char* before) {
  MPI_Request request = MPI_REQUEST_NULL;
  SHARDRL_CHECK_MPI(MPI_Ibarrier(host_comm_.get(), &request));
  wait_polled(request, timeout_s_, fmt::format("the barrier before {}", before).c_str());
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
  SHARDRL_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  SHARDRL_CHECK_MPI(MPI_Comm_size(comm, &size_));
  MPI_Comm dup = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_dup(comm, &dup));
  host_comm_ = MpiComm(dup);
  comm_ = make_comm(-1, false);
  barrier_word_ = CudaBuffer(MemoryCategory::workspace, sizeof(float));
}

NcclCommunicator::~NcclCommunicator() {
  SHARDRL_CHECK(windows_.empty(), "a communicator destroyed before the symmetric memory it registered");
}

std::int64_t NcclCommunicator::device_bytes_outside_kokkos() const {
  std::int64_t bytes = static_cast<std::int64_t>(barrier_word_.bytes());
  for (const Window& w : windows_) bytes += static_cast<std::int64_t>(w.held);
  return bytes;
}

// The window's owner: frees it through its communicator, which must outlive it.
class SymmetricMemory final : public DeviceAllocation {
 public:
  SymmetricMemory(NcclCommunicator& owner, char* base, std::size_t bytes) : owner_(owner), base_(base), bytes_(bytes) {}
  ~SymmetricMemory() override { owner_.release_symmetric(base_); }
  char* data() const override { return base_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  NcclCommunicator& owner_;
  char* base_;
  std::size_t bytes_;
};

std::unique_ptr<DeviceAllocation> NcclCommunicator::allocate_symmetric(std::size_t bytes) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  // A window has the same size on every rank. Polled, as every wait before the blocking set-up:
  // a rank that never comes stops the job.
  unsigned long long agreed = bytes;
  all_reduce_polled(host_comm_.get(), &agreed, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, timeout_s_,
                    "the agreement on the symmetric memory's size");
  if (!copy_comm_.get()) copy_comm_ = make_comm(NCCL_CTA_POLICY_ZERO, true);
  void* base = nullptr;
  SHARDRL_CHECK_NCCL(ncclMemAlloc(&base, agreed));
  // ncclMemAlloc rounds the size up to its allocation granularity (the multicast one where the
  // GPUs have it, up to hundreds of MiB): what it holds is its address range, counted whole.
  std::size_t held = agreed;
  CUdeviceptr range_base = 0;
  std::size_t range_bytes = 0;
  if (cuMemGetAddressRange(&range_base, &range_bytes, reinterpret_cast<CUdeviceptr>(base)) == CUDA_SUCCESS &&
      range_bytes >= agreed)
    held = range_bytes;
  meet("ncclCommWindowRegister");
  ncclWindow_t window = nullptr;
  settle(ncclCommWindowRegister(copy_comm_.get(), base, agreed, &window, NCCL_WIN_COLL_SYMMETRIC),
         "ncclCommWindowRegister", copy_comm_.get());
  // NCCL registers no window where its ranks cannot map each other's memory (no peer access,
  // NCCL_WIN_ENABLE=0, several nodes without its network support): the caller allocates as
  // before, and its all-gathers stay on the kernels. The ranks agree, so that all route alike.
  int registered = window != nullptr ? 1 : 0;
  SHARDRL_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &registered, 1, MPI_INT, MPI_MIN, host_comm_.get()));
  if (!registered) {
    if (window) SHARDRL_CHECK_NCCL(ncclCommWindowDeregister(copy_comm_.get(), window));
    SHARDRL_CHECK_NCCL(ncclMemFree(base));
    return nullptr;
  }
  windows_.push_back(Window{static_cast<char*>(base), static_cast<std::size_t>(agreed), held, window});
  return std::make_unique<SymmetricMemory>(*this, static_cast<char*>(base), held);
#else
  (void)bytes;
  return nullptr;
#endif
}

void NcclCommunicator::release_symmetric(char* base) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  for (auto w = windows_.begin(); w != windows_.end(); ++w) {
    if (w->base != base) continue;
    // Nothing may still read or fill it: the streams that used it are drained first.
    SHARDRL_CHECK_CUDA(cudaDeviceSynchronize());
    settle(ncclCommWindowDeregister(copy_comm_.get(), static_cast<ncclWindow_t>(w->handle)),
           "ncclCommWindowDeregister", copy_comm_.get());
    SHARDRL_CHECK_NCCL(ncclMemFree(base));
    windows_.erase(w);
    return;
  }
#endif
  (void)base;
  SHARDRL_FATAL("release of symmetric memory this communicator did not allocate");
}

bool NcclCommunicator::in_window(const void* p, std::size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  for (const Window& w : windows_)
    if (c >= w.base && c + bytes <= w.base + w.bytes) return true;
  return false;
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

void NcclCommunicator::settle(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (!comm) comm = comm_.get();
  RunningTime running;   // a suspended job's stop is not counted
  for (long polls = 0; result == ncclInProgress; ++polls) {
    if (polls > 1000) sched_yield();
    if ((polls & 1023) == 0 && running.seconds() > timeout_s_)
      fail_and_abort(fmt::format("{} did not complete within comm.timeout_s = {} s: a peer rank failed "
                                 "or is not taking part",
                                 call, timeout_s_),
                     __FILE__, __LINE__);
    SHARDRL_CHECK_NCCL(ncclCommGetAsyncError(comm, &result));
  }
  if (result != ncclSuccess)
    fail_and_abort(fmt::format("{} failed: {} ({})", call, ncclGetErrorString(result), ncclGetLastError(comm)),
                   __FILE__, __LINE__);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t count, DataType type,
                                  StreamRef s) {
  const std::size_t bytes = count * size_of(type);
  if (!in_window(recv, bytes * static_cast<std::size_t>(size_))) {
    settle(ncclAllGather(send, recv, count, nccl_type(type), comm_.get(), stream(s)), "ncclAllGather");
    return;
  }
  // In place, so that both ends of every copy lie in the window: this rank's part is copied into
  // its place first (by a copy engine too), in stream order after whatever wrote `send`.
  char* own = static_cast<char*>(recv) + static_cast<std::size_t>(rank_) * bytes;
  const char* from = static_cast<const char*>(send);
  SHARDRL_CHECK(send == own || from + bytes <= static_cast<const char*>(recv) ||
                    from >= static_cast<const char*>(recv) + bytes * static_cast<std::size_t>(size_),
                "an all-gather's send buffer overlaps its receive buffer elsewhere than at its own part");
  if (send != own && bytes > 0)
    SHARDRL_CHECK_CUDA(cudaMemcpyAsync(own, send, bytes, cudaMemcpyDeviceToDevice, stream(s)));
  settle(ncclAllGather(own, recv, count, nccl_type(type), copy_comm_.get(), stream(s)),
         "ncclAllGather (copy engines)", copy_comm_.get());
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
  RunningTime running;   // a suspended job's stop is not counted
  cudaStream_t st = stream(s);
  for (long polls = 0;; ++polls) {
    cudaError_t q = cudaStreamQuery(st);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) SHARDRL_CHECK_CUDA(q);
    check_async_errors();
    if (polls > 1000) sched_yield();
    if ((polls & 1023) == 0 && running.seconds() > timeout_s_)
      fail_and_abort(fmt::format("NCCL collectives did not complete within comm.timeout_s = {} s: a "
                                 "peer rank failed or is not taking part",
                                 timeout_s_),
                     __FILE__, __LINE__);
  }
}

void NcclCommunicator::check_async_errors() {
  for (ncclComm_t c : {comm_.get(), copy_comm_.get()}) {
    if (!c) continue;
    ncclResult_t async = ncclSuccess;
    SHARDRL_CHECK_NCCL(ncclCommGetAsyncError(c, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      fail_and_abort(fmt::format("NCCL reported an asynchronous error on its {} communicator: {} (a peer rank "
                                 "failed or the network broke)",
                                 c == comm_.get() ? "main" : "copy-engine", ncclGetErrorString(async)),
                     __FILE__, __LINE__);
  }
}

}  // namespace shardrl
