// Collectives on typed buffers, one interface for two backends: NCCL (GPU buffers, enqueued
// on a CUDA stream) and MPI (host buffers, CPU builds). Every rank calls the same collectives
// in the same order. A collective that does not finish within the timeout, or a failed peer,
// aborts the whole job instead of hanging it.
#pragma once

#include "core/live_handles.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <mpi.h>

#include "core/bf16.hpp"
#include "core/device_allocation.hpp"
#include "core/device_stream.hpp"
#include "core/kokkos.hpp"

namespace shardrl {

enum class DataType { f32, f64, bf16, i32, i64, u8 };
enum class ReduceOp { sum, average, max };

std::size_t size_of(DataType t);
const char* name_of(DataType t);

template <class T> constexpr DataType data_type_of();
template <> constexpr DataType data_type_of<float>() { return DataType::f32; }
template <> constexpr DataType data_type_of<double>() { return DataType::f64; }
template <> constexpr DataType data_type_of<bf16>() { return DataType::bf16; }
template <> constexpr DataType data_type_of<std::int32_t>() { return DataType::i32; }
template <> constexpr DataType data_type_of<std::int64_t>() { return DataType::i64; }
template <> constexpr DataType data_type_of<std::uint8_t>() { return DataType::u8; }

// A CUDA stream (cudaStream_t) without including CUDA headers; null = the communicator's own
// stream. The MPI backend ignores it.
struct StreamRef {
  void* handle = nullptr;
};

// The stream of a Kokkos execution space instance, so collectives order after its kernels.
inline StreamRef stream_of(const ExecSpace& space) { return StreamRef{stream_handle(space)}; }

// Elements per rank when `total` elements are split into equal shards (the last padded).
inline std::size_t padded_shard(std::size_t total, int world_size) {
  return (total + static_cast<std::size_t>(world_size) - 1) / static_cast<std::size_t>(world_size);
}

class Communicator {
 public:
  Communicator() = default;
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend_name() const = 0;
  // The same ranks as an MPI communicator, for host-side agreements (mpi/host_exchange.hpp)
  // among the users of this one.
  virtual MPI_Comm host_comm() const = 0;

  // recv holds size()*count elements; rank r's `count` elements land at recv + r*count.
  // In place when send == recv + rank()*count. Into symmetric memory (below) the GPUs' copy
  // engines move the data, and no SM runs a communication kernel beside the compute.
  virtual void all_gather(const void* send, void* recv, std::size_t count, DataType type,
                          StreamRef stream) = 0;
  // send holds size()*count elements; rank r receives the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                              ReduceOp op, StreamRef stream) = 0;
  // In place when send == recv.
  virtual void all_reduce(const void* send, void* recv, std::size_t count, DataType type,
                          ReduceOp op, StreamRef stream) = 0;
  virtual void broadcast(void* buffer, std::size_t count, DataType type, int root,
                         StreamRef stream) = 0;
  // Personalised exchange (expert parallelism's token dispatch): this rank sends send_counts[p]
  // elements from send + send_offsets[p] to rank p and receives recv_counts[p] elements from p at
  // recv + recv_offsets[p]. Host arrays of size() entries, in elements; recv_counts[p] here must
  // equal send_counts[rank()] on p (exchange the counts first, e.g. with all_gather). Zero
  // counts send nothing; the receive ranges must not overlap each other or the send ranges.
  virtual void all_to_all_v(const void* send, const std::size_t* send_counts, const std::size_t* send_offsets,
                            void* recv, const std::size_t* recv_counts, const std::size_t* recv_offsets,
                            DataType type, StreamRef stream) = 0;
  virtual void barrier() = 0;
  // Collective: device memory of max over ranks of `bytes` on every rank, which all_gather fills
  // with copy engines when its receive buffer lies inside it, at the same offset on every rank
  // (the caller's guarantee: lay buffers out alike on all ranks). Null where the backend has no
  // such collectives (MPI; NCCL before 2.28; GPUs that cannot map each other's memory). Its
  // bytes() are what it holds, reported by device_bytes_outside_kokkos(); the caller counts them
  // in the memory ledger (the phase arena does).
  virtual std::unique_ptr<DeviceAllocation> allocate_symmetric(std::size_t /*bytes*/) { return nullptr; }
  // Device bytes this communicator holds outside Kokkos' allocations (counted in the memory
  // ledger all the same): what an allocation hook on Kokkos does not see.
  virtual std::int64_t device_bytes_outside_kokkos() const { return 0; }
  // Waits for everything enqueued on `stream`, within the timeout.
  virtual void synchronize(StreamRef stream) = 0;

  template <class T>
  void all_gather(const T* send, T* recv, std::size_t count, StreamRef s = {}) {
    all_gather(static_cast<const void*>(send), static_cast<void*>(recv), count, data_type_of<T>(), s);
  }
  template <class T>
  void reduce_scatter(const T* send, T* recv, std::size_t count, ReduceOp op, StreamRef s = {}) {
    reduce_scatter(static_cast<const void*>(send), static_cast<void*>(recv), count, data_type_of<T>(), op, s);
  }
  template <class T>
  void all_reduce(const T* send, T* recv, std::size_t count, ReduceOp op, StreamRef s = {}) {
    all_reduce(static_cast<const void*>(send), static_cast<void*>(recv), count, data_type_of<T>(), op, s);
  }
  template <class T>
  void broadcast(T* buffer, std::size_t count, int root, StreamRef s = {}) {
    broadcast(static_cast<void*>(buffer), count, data_type_of<T>(), root, s);
  }

 private:
  HandleCount counted_{HandleKind::communicator};
};

enum class CommBackendKind { nccl, mpi };

// Collective over `comm`. `timeout_s`: how long one collective (or synchronize) may take.
std::unique_ptr<Communicator> make_communicator(CommBackendKind kind, MPI_Comm comm, double timeout_s);

// True when this build has the backend compiled in.
bool has_backend(CommBackendKind kind);

}  // namespace shardrl
