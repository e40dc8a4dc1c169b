// What a train step minimises, as a function of the batch's per-token log-probabilities of the
// targets (and their entropies) under the distribution the objective names: called between the
// head's forward and backward, an objective writes dL/dlogp (and dL/dentropy) for every token (0
// where nothing is trained) and accumulates its statistics on the device, so the step never waits
// for the host. Supervised warm-up and GRPO are two objectives of the same step.
#pragma once

#include <fmt/format.h>

#include <string>

#include "core/kokkos.hpp"
#include "kernels/cross_entropy.hpp"
#include "model/transformer.hpp"

namespace shardrl {

class TokenObjective {
 public:
  virtual ~TokenObjective() = default;
  // The distribution the head scores targets under for this objective (the trainer sets it on
  // the model before the forward): temperature, and whether entropies are needed.
  virtual TokenDistribution distribution() const { return TokenDistribution{}; }
  // `entropy` and `dentropy` are non-null exactly when distribution().entropy.
  virtual void apply(const ExecSpace& space, const float* logp, const float* entropy, float* dlogp, float* dentropy,
                     int n) const = 0;
  // What a captured step bakes in: the buffers apply() reads and writes and its constants. Two
  // objectives with the same identity may share a CUDA graph.
  virtual std::string identity() const = 0;
};

// Cross-entropy: *loss += -scale * sum(mask * logp); scale makes it the mean over the global batch.
class MaskedNll final : public TokenObjective {
 public:
  MaskedNll(const float* mask, float scale, float* loss) : mask_(mask), scale_(scale), loss_(loss) {}
  void apply(const ExecSpace& space, const float* logp, const float*, float* dlogp, float*, int n) const override {
    kernels::masked_nll(space, logp, mask_, scale_, loss_, dlogp, n);
  }
  std::string identity() const override {
    return fmt::format("nll {} {} {}", static_cast<const void*>(mask_), scale_, static_cast<const void*>(loss_));
  }

 private:
  const float* mask_;
  float scale_;
  float* loss_;
};

}  // namespace shardrl
