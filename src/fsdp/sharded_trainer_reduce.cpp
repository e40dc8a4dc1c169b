// The gradients' way from backward to the slices: the two full-unit buffers backward writes
// into, their reduce-scatters on the communication stream (or, at one rank, the buffers read in
// place, or no buffers at all), and the reduced slices added into the persistent gradients (or,
// for a unit's first fp32 gradient of a step, reduce-scattered into them). The schedule that calls
// them is in sharded_trainer.cpp; the embedding's own gradient as rows in sharded_trainer_lookup.cpp.
#include "fsdp/sharded_trainer.hpp"

#include "core/trace.hpp"
#include "kernels/elementwise.hpp"

namespace shardrl {

int ShardedTrainer::take_grad_buffer(int unit) {
  int b = next_buffer_;
  if (layout_.unit(unit).gathered > capacity_[b]) b = 0;   // only buffer 0 holds the largest units
  next_buffer_ = b ^ 1;
  if (pending_[b] >= 0) finish_reduce(b);
  // Only the unit's part (padding included: it is reduce-scattered too). Zeroing the whole
  // buffer, sized for the largest unit (the embedding), cost 34 ms of a 217 ms llama-1b step.
  // With LoRA only the adapter region is written and reduced; a frozen unit's, nothing.
  const UnitShard& s = layout_.unit(unit);
  const std::int64_t from = s.gradient_from();
  if (s.trainable > 0) kernels::fill(space_, grad_full_[b].data() + from, 0.0f, s.gathered - from);
  return b;
}

// Where no gradient is exchanged or rounded (grads_in_place_, see the constructor) backward
// accumulates into the unit's persistent slice, zeroed first if it holds nothing since the
// optimizer step: the bits the buffers' route gives a micro-batch (zeros plus each term, then
// copied), and a later micro-batch's terms are added onto the slice one by one rather than
// summed apart first.
float* ShardedTrainer::gradient_in_place(int unit) {
  float* g = grad_.as<float>(unit);
  if (grad_empty_[unit]) kernels::fill(space_, g, 0.0f, layout_.unit(unit).trainable);
  grad_empty_[unit] = 0;
  return g;
}

void ShardedTrainer::reduce(int unit, int b) {
  const UnitShard& s = layout_.unit(unit);
  if (s.trainable == 0) return;   // a frozen unit (LoRA's embedding and head): no gradient
  const TraceSpan span("reduce-scatter unit", unit);
  const double t = now();
  const StreamRef comm{comm_stream_.get()};
  // Expert-parallel units: the dense pieces are reduce-scattered; each of this rank's experts got
  // its whole gradient here (every rank's tokens came to it), copied into the slice after them.
  // LoRA units: only the adapter region (its padded span from adapters_at); the base's part
  // of the buffer, experts included, was never written.
  const bool expert_grads = s.expert_parallel() && !s.adapters();
  const std::int64_t reduced = expert_grads ? s.dense : s.trainable;
  const std::int64_t mine = expert_grads ? s.shard - s.dense : 0;
  const std::int64_t own_experts = expert_grads ? s.experts_begin : 0;   // where backward put them
  const std::int64_t from = s.gradient_from();
  float* grad = grad_full_[b].data() + from;
  const bool bf16_reduce = options_.reduce_dtype == GradDtype::bf16;
  if (bf16_reduce) kernels::cast(space_, grad, send_bf16_[b].data(), s.gathered - from);
  if (reduce_in_place_) {
    // One rank: the slice is read where it is (finish_reduce), in stream order; the
    // communication stream takes no part.
    reduced_[b].record(compute_stream());
  } else {
    if (bf16_reduce) {
      if (mine > 0) kernels::cast(space_, send_bf16_[b].data() + own_experts, recv_bf16_[b].data() + reduced, mine);
      grad_ready_[b].record(compute_stream());
      grad_ready_[b].wait(comm_stream_.get());
      comm_.reduce_scatter(send_bf16_[b].data(), recv_bf16_[b].data(), static_cast<std::size_t>(reduced),
                           ReduceOp::sum, comm);
    } else {
      // The unit's first gradient since the optimizer step, reduced in fp32 for fp32 main
      // gradients: the collective writes the persistent slice itself, where finish_reduce would
      // only copy the receive buffer (a pass over every gradient slice per step, 2 x 2.5 GB for
      // llama-1b at 2 ranks). Later ones (micro-batches, a tied embedding's second share) are
      // received and added; the communication stream runs them after this one.
      received_in_slice_[b] = mine == 0 && grad_empty_[unit] && grad_.type() == GradDtype::fp32;
      float* out = received_in_slice_[b] ? grad_.as<float>(unit) : recv_f32_[b].data();
      if (received_in_slice_[b]) grad_empty_[unit] = 0;
      if (mine > 0) kernels::cast(space_, grad + own_experts, recv_f32_[b].data() + reduced, mine);
      grad_ready_[b].record(compute_stream());
      grad_ready_[b].wait(comm_stream_.get());
      comm_.reduce_scatter(grad, out, static_cast<std::size_t>(reduced), ReduceOp::sum, comm);
    }
    reduced_[b].record(comm_stream_.get());
  }
  pending_[b] = unit;
  if (!reduce_in_place_) {   // the collectives that ran
    profile_.reduce_scatters += 1;
    profile_.reduce_scatter_bytes += reduced * layout_.world_size() * (bf16_reduce ? 2 : 4);
  }
  if (options_.profile) {
    comm_.synchronize(comm);
    profile_.reduce_s += now() - t;
  }
}

// The reduced slice of `b` is added into its unit's persistent gradient, on the compute stream;
// where reduce() had the collective write that gradient itself, only waited for.
void ShardedTrainer::finish_reduce(int b) {
  const int u = pending_[b];
  const long n = static_cast<long>(layout_.unit(u).trainable);
  reduced_[b].wait(compute_stream());
  if (received_in_slice_[b]) {   // the collective wrote the slice (reduce)
    received_in_slice_[b] = false;
    pending_[b] = -1;
    return;
  }
  // The first gradient since the optimizer step is copied, later ones (micro-batches, the tied
  // embedding's second share) are added.
  auto take = [&](const auto* reduced) {
    grad_.visit(u, [&](auto* g) {
      if (grad_empty_[u]) kernels::cast(space_, reduced, g, n);
      else kernels::add_scaled(space_, reduced, g, 1.0f, n);
    });
    grad_empty_[u] = 0;
  };
  // In place (one rank): the unit's reduced part where reduce() put it, from its adapters on.
  const UnitShard& s = layout_.unit(u);
  const std::int64_t from = s.gradient_from();
  if (options_.reduce_dtype == GradDtype::bf16) take(reduce_in_place_ ? send_bf16_[b].data() : recv_bf16_[b].data());
  else take(reduce_in_place_ ? grad_full_[b].data() + from : recv_f32_[b].data());
  pending_[b] = -1;
}

}  // namespace shardrl
