// The model's ExpertExchange over the job's Communicator: rows with all_to_all_v on the model's
// execution space's stream; counts and agreements as host integers over the host communicator.
#pragma once

#include <cstdint>

#include "core/kokkos.hpp"
#include "model/expert_exchange.hpp"
#include "model/transformer.hpp"
#include "mpi/communicator.hpp"

namespace shardrl {

class CommExpertExchange final : public ExpertExchange {
 public:
  CommExpertExchange(Communicator& comm, const ExecSpace& space);
  int ranks() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  void exchange_counts(const std::int32_t* send, std::int32_t* recv, int per) override;
  void exchange_rows(const void* send, const std::size_t* send_rows, const std::size_t* send_first, void* recv,
                     const std::size_t* recv_rows, const std::size_t* recv_first, int width, bool bf16) override;
  void agree_max(std::int32_t* values, int n) override;

 private:
  Communicator& comm_;
  ExecSpace space_;
};

}  // namespace shardrl
