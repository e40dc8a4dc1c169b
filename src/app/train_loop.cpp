#include "app/train_loop.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace shardrl {

TrainLoop::TrainLoop(Transformer& model, ShardedTrainer& trainer, Communicator& comm, const Config& config)
    : model_(model), trainer_(trainer), comm_(comm), config_(config),
      mask_("mask", static_cast<std::size_t>(model.options().max_batch) * model.options().max_seq_len),
      loss_("loss", 1) {
  mask_host_ = Kokkos::create_mirror_view(mask_);
  loss_host_ = Kokkos::create_mirror_view(loss_);
}

void TrainLoop::step(std::int64_t it) {
  const int B = model_.options().max_batch, S = model_.options().max_seq_len;
  const int micro = static_cast<int>(config_.train.micro_batches), world = comm_.size();
  const float tokens = float(world) * micro * B * (S - 1);   // masked tokens in the global batch
  const auto t0 = std::chrono::steady_clock::now();
  watchdog_.arm(config_.comm.timeout_s, fmt::format("iteration {}", it + 1));
  trainer_.reset_profile();
  Kokkos::deep_copy(loss_, 0.0f);
  for (int k = 0; k < micro; ++k) {
    const std::int64_t first = (std::int64_t(comm_.rank()) * micro + k) * B;
    TokenBatch b = pattern_batch(static_cast<std::uint64_t>(config_.run.seed), it, first, B, S,
                                 model_.options().shape.vocab_size);
    model_.set_batch(b.tokens.data(), b.targets.data(), B, S);
    for (int i = 0; i < B * S; ++i) mask_host_(i) = b.mask[i];
    Kokkos::deep_copy(mask_, mask_host_);
    trainer_.forward_backward(mask_.data(), 1.0f / tokens, loss_.data());
  }
  trainer_.optimizer_step();
  comm_.all_reduce(loss_.data(), loss_.data(), 1, ReduceOp::sum, stream_of(model_.space()));
  comm_.synchronize(stream_of(model_.space()));
  Kokkos::deep_copy(loss_host_, loss_);
  const StepMetrics m = trainer_.metrics();
  watchdog_.disarm();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("iteration {}/{}: loss {:.4f}  grad_norm {:.3f}{}  lr {:.2e}  {:.0f} tokens/s  {:.1f} ms", it + 1,
               config_.run.iterations, loss_host_(0), m.grad_norm, m.last_skipped ? " (skipped)" : "", m.lr,
               world * micro * B * S / seconds, seconds * 1e3);
  const StepProfile& p = trainer_.profile();
  if (p.gather_s + p.compute_s + p.reduce_s + p.optimizer_s > 0)
    spdlog::info("  profile: all-gather {:.1f} ms ({} x, {:.2f} MiB)  compute {:.1f} ms  reduce-scatter {:.1f} ms "
                 "({} x, {:.2f} MiB)  optimizer {:.1f} ms (all-reduce {} B)",
                 p.gather_s * 1e3, p.all_gathers, p.all_gather_bytes / double(1 << 20), p.compute_s * 1e3,
                 p.reduce_s * 1e3, p.reduce_scatters, p.reduce_scatter_bytes / double(1 << 20),
                 p.optimizer_s * 1e3, p.all_reduce_bytes);
}

}  // namespace shardrl
