#include "model/dense_parameters.hpp"

#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "model/init.hpp"

namespace shardrl {

DenseParameters::DenseParameters(const Transformer& model, const ExecSpace& space) : model_(model), space_(space) {
  const bool half = model.options().precision == Precision::bf16;
  for (const auto& u : model.units()) {
    main_.emplace_back(MemoryCategory::weights, "main_weights", u.numel);
    grads_.emplace_back(MemoryCategory::grads, "main_grads", u.numel);
    if (half) compute_.emplace_back(MemoryCategory::weights, "compute_weights", u.numel);
  }
}

void DenseParameters::initialize(std::uint64_t seed, float std) {
  for (int u = 0; u < unit_count(); ++u)
    init_unit_slice(space_, model_.units()[u], seed, std, 0, numel(u), main_[u].data());
  refresh_compute_weights();
  zero_grads();
}

void DenseParameters::zero_grads() {
  for (int u = 0; u < unit_count(); ++u) kernels::fill(space_, grads_[u].data(), 0.0f, numel(u));
}

void DenseParameters::refresh_compute_weights() {
  for (std::size_t u = 0; u < compute_.size(); ++u)
    kernels::cast(space_, main_[u].data(), compute_[u].data(), numel(static_cast<int>(u)));
}

const void* DenseParameters::compute_weights(int unit) const {
  return compute_.empty() ? static_cast<const void*>(main_[unit].data()) : compute_[unit].data();
}

void forward_backward(Transformer& model, DenseParameters& params, const float* mask, float scale, float* loss) {
  const int head = model.head_unit();
  const void* embed = params.compute_weights(0);
  model.set_token_distribution(TokenDistribution{});   // cross-entropy: the model's own distribution
  for (int u = 0; u < model.unit_count(); ++u)
    model.forward_unit(u, params.compute_weights(u), u == head ? embed : nullptr);
  kernels::masked_nll(model.space(), model.logp(), mask, scale, loss, model.dlogp(), model.tokens_in_batch());
  const bool tied = model.options().shape.tie_embeddings;
  for (int u = head; u >= 0; --u)
    model.backward_unit(u, params.compute_weights(u), params.grads(u), u == head && tied ? embed : nullptr,
                        u == head && tied ? params.grads(0) : nullptr);
}

}  // namespace shardrl
