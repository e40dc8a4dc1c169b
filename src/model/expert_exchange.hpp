// Expert parallelism's traffic, as the model sees it: each rank computes the experts it owns
// (rank r of W: experts r * E / W .. (r + 1) * E / W - 1) for the tokens of every rank, so an
// MoE layer sends each routed row to its expert's rank and the outputs back. The model knows
// only this interface; fsdp/comm_expert_exchange.hpp implements it over the job's communicator.
// Every rank makes the same calls in the same order (each MoE layer's forward and backward), so
// ranks that decode with it run the same forwards: agree_max lets them settle each step's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrl {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int ranks() const = 0;
  virtual int rank() const = 0;
  // Host integers, `per` for each rank: send[q * per + j] goes to rank q, recv[s * per + j]
  // comes from rank s. Waits for the exchange.
  virtual void exchange_counts(const std::int32_t* send, std::int32_t* recv, int per) = 0;
  // Device rows of `width` elements (fp32, or bf16 when `bf16`), ordered after the work already
  // enqueued on the model's execution space and before what is enqueued next: send_rows[q]
  // rows from row send_first[q] go to rank q; recv_rows[s] rows from rank s land at row
  // recv_first[s]. Host arrays of ranks() entries.
  virtual void exchange_rows(const void* send, const std::size_t* send_rows, const std::size_t* send_first,
                             void* recv, const std::size_t* recv_rows, const std::size_t* recv_first, int width,
                             bool bf16) = 0;
  // Host integers: each of values[0, n) becomes its largest over the ranks. Waits for the ranks.
  virtual void agree_max(std::int32_t* values, int n) = 0;
};

}  // namespace shardrl
