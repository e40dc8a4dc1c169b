// Every unit's parameters whole on this rank: fp32 main weights and gradients per unit, plus a
// bf16 compute copy in bf16 mode (in fp32 mode the main weights are the compute weights: no
// second fp32 copy). The unsharded reference that FSDP is tested against, and the store for
// single-rank runs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kokkos.hpp"
#include "core/ledger_view.hpp"
#include "model/transformer.hpp"

namespace shardrl {

class DenseParameters {
 public:
  DenseParameters(const Transformer& model, const ExecSpace& space);

  // Fresh weights (model/init.hpp), gradients zeroed.
  void initialize(std::uint64_t seed, float std);
  void zero_grads();
  // After the main weights changed: refresh the bf16 compute copy (no-op in fp32 mode).
  void refresh_compute_weights();

  const void* compute_weights(int unit) const;
  float* main_weights(int unit) const { return main_[unit].data(); }
  float* grads(int unit) const { return grads_[unit].data(); }
  std::int64_t numel(int unit) const { return static_cast<std::int64_t>(main_[unit].size()); }
  int unit_count() const { return static_cast<int>(main_.size()); }

 private:
  const Transformer& model_;
  ExecSpace space_;
  std::vector<LedgerView<float>> main_, grads_;
  std::vector<LedgerView<bf16>> compute_;   // bf16 mode only
};

// One forward and backward over all units of `params` for the batch set on `model`:
// loss += -scale * sum(mask * logp) on the device, gradients accumulated into params.grads.
void forward_backward(Transformer& model, DenseParameters& params, const float* mask, float scale,
                      float* loss);

}  // namespace shardrl
