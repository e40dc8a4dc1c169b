#include "fsdp/sharded_trainer.hpp"

#include <fmt/format.h>

#include <chrono>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "model/init.hpp"

namespace shardrl {

namespace {

// The options as the trainer keeps them: one that only samples keeps no KL reference either
// (the reference is the KL term's, which only training computes).
FsdpOptions as_kept(FsdpOptions options) {
  options.keep_reference = options.keep_reference && options.trains;
  return options;
}

}  // namespace

ShardedTrainer::ShardedTrainer(Transformer& model, Communicator& comm, const FsdpOptions& options,
                               const OptimizerOptions& optimizer)
    : model_(model), comm_(comm), options_(as_kept(options)), space_(model.space()),
      layout_(model.units(), comm.size(), comm.rank(), options.expert_parallel, model.options().shape.lora.on()),
      optimizer_(optimizer, model.space()) {
  SHARDRL_CHECK(options.expert_parallel == (model.options().expert_exchange != nullptr),
                "fsdp.expert_parallel needs the model built with an ExpertExchange (make_expert_exchange), and "
                "an ExpertExchange needs fsdp.expert_parallel");
  const GradDtype compute_type = model_.options().precision == Precision::bf16 ? GradDtype::bf16 : GradDtype::fp32;
  // The trainable state covers each slice's trainable part: all of it, or with LoRA the adapters
  // only, whose frozen base then lives in the compute-type slices alone (also in fp32 mode).
  using Extent = UnitSlices::Extent;
  main_ = UnitSlices(layout_, GradDtype::fp32, MemoryCategory::weights, "main_weights", Extent::trainable);
  if (compute_type == GradDtype::bf16 || lora())
    compute_ = UnitSlices(layout_, compute_type, MemoryCategory::weights, "compute_slice");
  if (options_.trains) {
    grad_ = UnitSlices(layout_, options_.main_grad_dtype, MemoryCategory::grads, "main_grads", Extent::trainable);
    m_ = UnitSlices(layout_, options_.state_dtype, MemoryCategory::optimizer, "adam_m", Extent::trainable);
    v_ = UnitSlices(layout_, options_.state_dtype, MemoryCategory::optimizer, "adam_v", Extent::trainable);
  }
  grad_empty_.assign(static_cast<std::size_t>(layout_.unit_count()), 1);   // nothing accumulated yet
  // With LoRA the reference policy is the frozen base: the same slices with the adapters off.
  if (options_.keep_reference && !lora())
    reference_ = UnitSlices(layout_, compute_type, MemoryCategory::weights, "reference_slice");

  // Two slots let the next unit's all-gather overlap this unit's compute; keeping every unit
  // gathered from forward to backward needs one per unit. At one rank a unit's own slice is the
  // whole unit, laid out as a gather lays it (checked below): the slots are views of the slices,
  // with no memory and no copies, unless released weights are to be poisoned (check_released),
  // which must not touch the slices themselves.
  const int units = model_.unit_count();
  const int slot_count = options_.reshard_after_forward ? 2 : units;
  bool views = layout_.world_size() == 1 && !options_.check_released;
  for (int u = 0; u < units; ++u) {
    const UnitShard& s = layout_.unit(u);
    views = views && !s.expert_parallel() && s.shard == s.gathered && (!s.adapters() || s.base == s.adapters_at);
  }
  slots_ = views ? std::make_unique<GatherSlots>(GatherSlots::views(slot_count, space_))
                 : std::make_unique<GatherSlots>(slot_count, layout_.max_gathered(), model_.compute_type_size(),
                                                 options_.check_released, model_.options().arena, space_);
  gathered_ = std::vector<DeviceEvent>(slot_count);
  last_handle_.resize(units);
  // Transient buffers share the model's arena placement (the train phase), if it has one.
  const ArenaPlacement at = model_.options().arena;
  // Two full-unit gradient buffers, so that a unit's reduce-scatter overlaps the next unit's
  // backward. Buffer 0 holds any unit; buffer 1 every unit but the embedding and an untied head,
  // i.e. up to the largest decoder layer (for llama-1b: 1.05 GB -> 0.25 GB, and its receive
  // buffer 1 / ranks of that). The vocabulary-sized units take buffer 0: an untied head and
  // the embedding are never next to each other in backward, and a tied head, whose own gradient
  // is its final norm's, computes the embedding's beside it in the other buffer
  // (forward_backward).
  std::int64_t slice[2] = {layout_.max_shard(), 0};   // the receive buffers'
  capacity_[0] = layout_.max_gathered();
  capacity_[1] = 0;
  for (int u = 1; u < units; ++u) {
    if (u == model_.head_unit() && !tied()) continue;
    capacity_[1] = std::max(capacity_[1], layout_.unit(u).gathered);
    slice[1] = std::max(slice[1], layout_.unit(u).shard);
  }
  // At one rank a reduce-scatter is the identity: without expert-parallel units (whose own
  // experts are copied into the receive buffer past the reduced part) the gradient buffer (or its
  // bf16 copy) is its own receive buffer, and no collective runs.
  reduce_in_place_ = layout_.world_size() == 1;
  for (int u = 0; u < units; ++u) reduce_in_place_ = reduce_in_place_ && !layout_.unit(u).expert_parallel();
  // Then, with fp32 gradients reduced in fp32 and no adapters, a unit's gradient is its slice's,
  // neither exchanged nor rounded, and each slice is laid out as its unit (as for the views
  // above): backward accumulates straight into the persistent slices (gradient_in_place), with
  // no full-unit buffers (qwen3-0.6b: 0.64 GB) and no copy of each gradient into its slice.
  grads_in_place_ = reduce_in_place_ && options_.reduce_dtype == GradDtype::fp32 &&
                    options_.main_grad_dtype == GradDtype::fp32 && !lora();
  for (int u = 0; u < units; ++u) grads_in_place_ = grads_in_place_ && layout_.unit(u).shard == layout_.unit(u).gathered;
  const ModelShape& shape = model_.options().shape;
  const int tokens = model_.lookup_rows_capacity();
  const UnitShard& embedding = layout_.unit(0);   // the table alone, from its slices' offset 0
  const bool as_rows = lookup_as_rows(layout_.world_size(), tokens, shape.vocab_size);
  lookup_forward_ = as_rows && !embedding.adapters() && !embedding.expert_parallel();
  lookup_rows_ = as_rows && embedding.trainable > 0 && options_.trains;
  if (lookup_forward_ || lookup_rows_) {
    const auto rows = static_cast<std::size_t>(layout_.world_size()) * static_cast<std::size_t>(tokens);
    lookup_ids_ = LedgerView<std::int32_t>(at, MemoryCategory::workspace, "lookup_ids", rows);
    lookup_row_sums_ = LedgerView<float>(at, MemoryCategory::workspace, "lookup_row_sums", rows * shape.d_model);
  }
  for (int b = 0; b < 2 && options_.trains; ++b) {
    const auto padded = static_cast<std::size_t>(grads_in_place_ ? 0 : capacity_[b]);
    const auto shard = static_cast<std::size_t>(reduce_in_place_ ? 0 : slice[b]);
    grad_full_[b] = LedgerView<float>(at, MemoryCategory::workspace, "grad_full", padded);
    if (options_.reduce_dtype == GradDtype::bf16) {
      send_bf16_[b] = LedgerView<bf16>(at, MemoryCategory::workspace, "grad_send_bf16", padded);
      recv_bf16_[b] = LedgerView<bf16>(at, MemoryCategory::workspace, "grad_recv_bf16", shard);
    } else {
      recv_f32_[b] = LedgerView<float>(at, MemoryCategory::workspace, "grad_recv", shard);
    }
  }
}

ShardedTrainer::~ShardedTrainer() = default;

const UnitSlices& ShardedTrainer::slices(SliceState state) const {
  SHARDRL_CHECK(options_.trains || state == SliceState::main || state == SliceState::reference,
                "the Adam moments of a trainer that only samples (FsdpOptions::trains = false)");
  switch (state) {
    case SliceState::main: return main_;
    case SliceState::exp_avg: return m_;
    case SliceState::exp_avg_sq: return v_;
    case SliceState::reference: break;
  }
  SHARDRL_CHECK(!reference_.empty(), "the reference slices, but the trainer keeps none (FsdpOptions::keep_reference)");
  return reference_;
}

const void* ShardedTrainer::compute_slice(int u) const {
  return compute_.empty() ? main_.address(u) : compute_.address(u);
}

bool ShardedTrainer::tied() const { return model_.options().shape.tie_embeddings; }

bool ShardedTrainer::lora() const { return model_.options().shape.lora.on(); }

DataType ShardedTrainer::compute_data_type() const {
  return model_.options().precision == Precision::bf16 ? DataType::bf16 : DataType::f32;
}

StreamHandle ShardedTrainer::compute_stream() const { return stream_of(space_).handle; }

double ShardedTrainer::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ShardedTrainer::initialize(std::uint64_t seed, float std) {
  // With LoRA the whole slice is formed in an fp32 staging buffer first (the base has no fp32
  // home), then cast into the compute slice; the trainable part is also the main weights.
  LedgerView<float> staging;
  if (lora()) staging = LedgerView<float>(MemoryCategory::workspace, "init_slice", std::size_t(layout_.max_shard()));
  for (int u = 0; u < layout_.unit_count(); ++u) {
    const UnitShard& s = layout_.unit(u);
    float* slice = lora() ? staging.data() : main_.as<float>(u);
    if (lora()) kernels::fill(space_, slice, 0.0f, s.shard);   // a base piece's slot beyond the base
    for (const SlicePiece& piece : layout_.pieces(u)) {
      const std::int64_t end = std::min(piece.flat_begin + piece.length, s.numel);
      float* out = slice + piece.slice_offset;
      if (piece.flat_begin < end) init_unit_slice(space_, model_.units()[u], seed, std, piece.flat_begin, end, out);
      const std::int64_t written = std::max<std::int64_t>(0, end - piece.flat_begin);
      kernels::fill(space_, out + written, 0.0f, piece.length - written);   // padding beyond the unit
    }
    if (lora()) {
      kernels::cast(space_, slice + s.trainable_offset, main_.as<float>(u), s.trainable);
      compute_.visit(u, [&](auto* c) { kernels::cast(space_, static_cast<const float*>(slice), c, s.shard); });
    } else if (!compute_.empty()) {
      kernels::cast(space_, main_.as<float>(u), compute_.as<bf16>(u), s.shard);
    }
    for (const UnitSlices* zeroed : {&grad_, &m_, &v_})
      if (!zeroed->empty()) zeroed->visit(u, [&](auto* p) { kernels::fill(space_, p, 0.0f, s.trainable); });
  }
  grad_empty_.assign(static_cast<std::size_t>(layout_.unit_count()), 1);
  optimizer_.set_counters(0, 0);
}

// ---- The schedule --------------------------------------------------------------------------

const void* ShardedTrainer::gather_source(int u) const {
  return source_ == WeightSource::reference ? reference_.address(u) : compute_slice(u);
}

GatheredUnit ShardedTrainer::gather(int u) {
  if (slots_->holding(u) >= 0) return last_handle_[u] = slots_->current(u);
  const void* source = gather_source(u);
  if (slots_->holds_views()) {   // one rank: the slice is the unit, current in stream order
    GatheredUnit g = slots_->claim(u, source);
    gathered_[g.slot].record(compute_stream());
    return last_handle_[u] = g;
  }
  const TraceSpan span("all-gather unit", u);
  const double t = now();
  GatheredUnit g = slots_->claim(u);
  const UnitShard& s = layout_.unit(u);
  const DataType type = compute_data_type();
  // The communication stream starts after everything computed so far: the own slice is up to
  // date and the slot's previous unit is no longer read.
  const std::int64_t es = static_cast<std::int64_t>(model_.compute_type_size());
  // The own experts' copy runs on the compute stream, before the point the communication stream
  // waits for.
  copy_own_experts(u, source, slots_->buffer(g.slot), type);
  compute_point_.record(compute_stream());
  compute_point_.wait(comm_stream_.get());
  all_gather_as_trained(u, source, slots_->buffer(g.slot), type, StreamRef{comm_stream_.get()});
  gathered_[g.slot].record(comm_stream_.get());
  profile_.all_gathers += s.adapters() ? 2 : 1;
  profile_.all_gather_bytes += (s.expert_parallel() ? s.dense : s.shard) * layout_.world_size() * es;
  if (options_.profile) {
    comm_.synchronize(StreamRef{comm_stream_.get()});
    profile_.gather_s += now() - t;
  }
  return last_handle_[u] = g;
}

void ShardedTrainer::prefetch(int u) {
  if (u >= 0 && u < model_.unit_count() && slots_->holding(u) < 0 && slots_->has_free()) gather(u);
}

// The next unit, except before a tied head when the embedding is not held (resharded after its
// own forward, or never gathered: forward_lookup_rows): the head needs it again, and it is the
// largest unit, while the head's own weights, a final norm, are small enough to gather unhidden.
void ShardedTrainer::prefetch_after(int u) {
  const int head = model_.head_unit();
  if (u + 1 == head && tied() && slots_->holding(0) < 0) prefetch(0);
  else prefetch(u + 1);
}

void ShardedTrainer::release(int u) {
  // A slot is refilled only after the compute stream passes this point (see gather()).
  slots_->release(u);
}

void ShardedTrainer::compute_forward(const GatheredUnit& w, const GatheredUnit& embedding) {
  slots_->verify(w, "forward");
  gathered_[w.slot].wait(compute_stream());
  if (embedding.unit >= 0) {
    slots_->verify(embedding, "forward (tied head)");
    gathered_[embedding.slot].wait(compute_stream());
  }
  const TraceSpan span("forward unit", w.unit);
  const double t = now();
  model_.forward_unit(w.unit, w.weights, embedding.weights);
  if (options_.profile) {
    space_.fence();
    profile_.compute_s += now() - t;
  }
}

void ShardedTrainer::compute_backward(const GatheredUnit& w, const GatheredUnit& embedding, float* grads,
                                      float* embedding_grads) {
  slots_->verify(w, "backward");
  gathered_[w.slot].wait(compute_stream());
  if (embedding.unit >= 0) {
    slots_->verify(embedding, "backward (tied head)");
    gathered_[embedding.slot].wait(compute_stream());
  }
  const TraceSpan span("backward unit", w.unit);
  const double t = now();
  model_.backward_unit(w.unit, w.weights, grads, embedding.weights, embedding_grads);
  if (options_.profile) {
    space_.fence();
    profile_.compute_s += now() - t;
  }
}

void ShardedTrainer::forward_backward(const float* mask, float scale, float* loss) {
  forward_backward(MaskedNll(mask, scale, loss));
}

void ShardedTrainer::forward_logp(float* out, WeightSource source, float temperature) {
  const TraceSpan span(source == WeightSource::reference ? "reference log-probs" : "log-probs");
  SHARDRL_CHECK(source == WeightSource::policy || options_.keep_reference,
                "forward_logp of the reference policy, but the trainer keeps none (FsdpOptions::keep_reference)");
  const bool base_as_reference = source == WeightSource::reference && lora();
  if (base_as_reference) model_.set_adapters(false);
  source_ = base_as_reference ? WeightSource::policy : source;
  model_.set_token_distribution(TokenDistribution{temperature, false});
  const int units = model_.unit_count(), head = model_.head_unit();
  for (int u = 0; u < units; ++u) {
    if (u == 0 && lookup_forward_) {   // from the slices, no gather
      forward_lookup_rows();
      continue;
    }
    GatheredUnit w = gather(u);
    GatheredUnit embedding = (u == head && tied()) ? gather(0) : GatheredUnit{};
    prefetch_after(u);
    compute_forward(w, embedding);
    release(u);
  }
  if (tied()) release(0);
  source_ = WeightSource::policy;   // the next gathers (the train step's) read the policy
  model_.set_adapters(true);
  kernels::cast(space_, model_.logp(), out, model_.tokens_in_batch());
}

void ShardedTrainer::snapshot_reference() {
  SHARDRL_CHECK(options_.keep_reference, "snapshot_reference without FsdpOptions::keep_reference");
  if (lora()) return;   // the reference is the frozen base, which no step changes
  for (int u = 0; u < layout_.unit_count(); ++u) {
    const long n = static_cast<long>(layout_.unit(u).shard);
    reference_.visit(u, [&](auto* r) {
      using T = std::remove_pointer_t<decltype(r)>;   // the compute type
      kernels::cast(space_, static_cast<const T*>(compute_slice(u)), r, n);
    });
  }
}

void ShardedTrainer::forward_backward(const TokenObjective& objective) {
  SHARDRL_CHECK(options_.trains, "forward_backward of a trainer that only samples (FsdpOptions::trains = false)");
  const int units = model_.unit_count(), head = model_.head_unit();
  const bool reshard = options_.reshard_after_forward;
  model_.set_token_distribution(objective.distribution());

  // Forward: gather u (prefetched), start gathering u+1, compute u, release u. The embedding
  // may be looked up from the slices instead (forward_lookup_rows), with no gather.
  for (int u = 0; u < units; ++u) {
    if (u == 0 && lookup_forward_) {
      forward_lookup_rows();
      continue;
    }
    GatheredUnit w = gather(u);
    GatheredUnit embedding = (u == head && tied()) ? gather(0) : GatheredUnit{};
    prefetch_after(u);
    compute_forward(w, embedding);
    if (reshard && u != head) release(u);   // the head (and a tied embedding) go straight on to backward
  }
  const bool entropy = objective.distribution().entropy;
  objective.apply(space_, model_.logp(), entropy ? model_.entropy() : nullptr, model_.dlogp(),
                  entropy ? model_.dentropy() : nullptr, model_.tokens_in_batch());

  // Backward in reverse: gather u (prefetched), start gathering u-1, compute into a full-unit
  // gradient buffer, reduce-scatter it on the communication stream, release u. The embedding's
  // own gradient may go as rows instead (reduce_lookup_rows), which needs no gather, and a
  // frozen embedding (LoRA) has none: its backward, which would only gather it, is skipped.
  const bool embedding_backward = layout_.unit(0).trainable > 0 && !lookup_rows_;
  for (int u = head; u >= 0; --u) {
    if (u == 0 && !embedding_backward) {
      if (lookup_rows_) reduce_lookup_rows();   // rows, from no weights
      break;
    }
    GatheredUnit w = gather(u);
    const bool tied_head = u == head && tied();
    GatheredUnit embedding = tied_head ? gather(0) : GatheredUnit{};
    if (u > 1 || embedding_backward) prefetch(u - 1);
    if (grads_in_place_) {
      compute_backward(w, embedding, gradient_in_place(u), tied_head ? gradient_in_place(0) : nullptr);
    } else {
      // A tied head: the embedding's gradient takes its buffer first (buffer 0 where only that
      // one holds it), the head's the other (buffer 1 holds the head), and the next layer the
      // head's, so that the embedding's reduce-scatter overlaps that layer's backward.
      const int eb = tied_head ? take_grad_buffer(0) : -1;
      const int b = take_grad_buffer(u);
      if (tied_head) next_buffer_ = b;
      compute_backward(w, embedding, grad_full_[b].data(), tied_head ? grad_full_[eb].data() : nullptr);
      reduce(u, b);
      if (tied_head) reduce(0, eb);
    }
    if (reshard) {
      release(u);
      if (tied_head) release(0);
    }
  }
  for (int b = 0; b < 2; ++b)
    if (pending_[b] >= 0) finish_reduce(b);
  if (!reshard)
    for (int u = 0; u < units; ++u)
      if (slots_->holding(u) >= 0) release(u);   // weights change in the optimizer step
}

void ShardedTrainer::optimizer_step() {
  SHARDRL_CHECK(options_.trains, "optimizer_step of a trainer that only samples (FsdpOptions::trains = false)");
  const TraceSpan span("optimizer");
  const double t = now();
  for (int u = 0; u < layout_.unit_count(); ++u)   // no gradient since the last step: zero
    if (grad_empty_[u]) {
      const long n = static_cast<long>(layout_.unit(u).trainable);
      grad_.visit(u, [&](auto* g) { kernels::fill(space_, g, 0.0f, n); });
    }
  optimizer_.begin_norm();
  for (int u = 0; u < layout_.unit_count(); ++u) {
    const long n = static_cast<long>(layout_.unit(u).trainable);
    grad_.visit(u, [&](const auto* g) { optimizer_.accumulate_sumsq(g, n); });
  }
  comm_.all_reduce(optimizer_.sumsq(), optimizer_.sumsq(), 1, ReduceOp::sum, stream_of(space_));
  profile_.all_reduce_bytes += sizeof(*optimizer_.sumsq());
  optimizer_.prepare_step();
  const float wd = optimizer_.options().weight_decay;
  for (int u = 0; u < layout_.unit_count(); ++u) {
    for (const SliceRange& r : layout_.ranges(u)) {
      const long n = static_cast<long>(r.end - r.begin);
      const float decay = (r.no_decay && !options_.decay_norms_and_embeddings) ? 0.0f : wd;
      float* w = main_.as<float>(u) + r.begin;
      // The bf16 copy the next step gathers is rounded from the updated weights in the same pass;
      // elements outside every range (the shard's padding) never change in either. (Ranges are
      // offsets in the trainable part, which starts trainable_offset into the compute slice.)
      const std::int64_t at = layout_.unit(u).trainable_offset + r.begin;
      bf16* compute = compute_.type() == GradDtype::bf16 && !compute_.empty() ? compute_.as<bf16>(u) + at : nullptr;
      grad_.visit(u, [&](const auto* g) {
        m_.visit(u, [&](auto* m) {
          using State = std::remove_pointer_t<decltype(m)>;   // the moments share one type
          optimizer_.update(w, g + r.begin, m + r.begin, v_.as<State>(u) + r.begin, n, decay, compute);
        });
      });
      // LoRA in fp32: the compute slice is fp32 and separate (it holds the base): copy the range.
      if (!compute_.empty() && compute_.type() == GradDtype::fp32)
        kernels::cast(space_, static_cast<const float*>(w), compute_.as<float>(u) + at, n);
    }
    grad_empty_[u] = 1;
  }
  if (options_.profile) {
    space_.fence();
    profile_.optimizer_s += now() - t;
  }
}

void ShardedTrainer::add_replayed_profile(const StepProfile& step) {
  profile_.all_gathers += step.all_gathers;
  profile_.all_gather_bytes += step.all_gather_bytes;
  profile_.reduce_scatters += step.reduce_scatters;
  profile_.reduce_scatter_bytes += step.reduce_scatter_bytes;
  profile_.all_reduce_bytes += step.all_reduce_bytes;
}

std::vector<const void*> ShardedTrainer::buffer_addresses() const {
  std::vector<const void*> out;
  for (const UnitSlices* per_unit : {&main_, &compute_, &grad_, &m_, &v_, &reference_})
    if (!per_unit->empty())
      for (int u = 0; u < layout_.unit_count(); ++u) out.push_back(per_unit->address(u));
  for (int slot = 0; slot < slots_->count(); ++slot) out.push_back(slots_->buffer(slot));
  for (int b = 0; b < 2; ++b)
    for (const void* p : {static_cast<const void*>(grad_full_[b].data()), static_cast<const void*>(send_bf16_[b].data()),
                          static_cast<const void*>(recv_f32_[b].data()), static_cast<const void*>(recv_bf16_[b].data())})
      out.push_back(p);
  out.push_back(lookup_ids_.data());
  out.push_back(lookup_row_sums_.data());
  out.push_back(optimizer_.sumsq());
  return out;
}

void ShardedTrainer::gather_all_units(const std::vector<void*>& out) {
  SHARDRL_CHECK(static_cast<int>(out.size()) == layout_.unit_count(), "one output buffer per unit");
  const DataType type = compute_data_type();
  for (int u = 0; u < layout_.unit_count(); ++u) {
    all_gather_unit(u, compute_slice(u), out[u], type, stream_of(space_));
    profile_.all_gathers += 1;
    profile_.all_gather_bytes += layout_.unit(u).padded * static_cast<std::int64_t>(model_.compute_type_size());
  }
  comm_.synchronize(stream_of(space_));
}

void ShardedTrainer::gather_unit(int u, void* out) {
  // The MPI backend reads host memory at once: what the space wrote there must be done.
  if (!kDeviceIsGpu) space_.fence();
  all_gather_unit(u, compute_slice(u), out, compute_data_type(), stream_of(space_));
  profile_.all_gathers += 1;
  profile_.all_gather_bytes += layout_.unit(u).padded * static_cast<std::int64_t>(model_.compute_type_size());
}

void ShardedTrainer::gather_unit_as_trained(int u, void* out) {
  const void* source = compute_slice(u);
  copy_own_experts(u, source, out, compute_data_type());
  if (!kDeviceIsGpu) space_.fence();   // the MPI backend reads host memory at once
  all_gather_as_trained(u, source, out, compute_data_type(), stream_of(space_));
  const UnitShard& s = layout_.unit(u);
  profile_.all_gathers += s.adapters() ? 2 : 1;
  profile_.all_gather_bytes += (s.expert_parallel() ? s.dense : s.shard) * layout_.world_size() *
                               static_cast<std::int64_t>(model_.compute_type_size());
}

void ShardedTrainer::copy_own_experts(int u, const void* source, void* out, DataType type) {
  const UnitShard& s = layout_.unit(u);
  if (!s.expert_parallel()) return;
  const std::int64_t es = static_cast<std::int64_t>(size_of(type));
  const std::int64_t mine = s.shard - s.dense - (s.adapters() ? s.trainable : 0);
  char* at = static_cast<char*>(out) + s.experts_begin * es;
  const char* from = static_cast<const char*>(source) + s.dense * es;
  if (type == DataType::bf16)
    kernels::cast(space_, reinterpret_cast<const bf16*>(from), reinterpret_cast<bf16*>(at), mine);
  else
    kernels::cast(space_, reinterpret_cast<const float*>(from), reinterpret_cast<float*>(at), mine);
}

void ShardedTrainer::all_gather_as_trained(int u, const void* source, void* out, DataType type, StreamRef stream) {
  const UnitShard& s = layout_.unit(u);
  if (!s.expert_parallel()) return all_gather_unit(u, source, out, type, stream);
  // Only the dense pieces travel (the own experts are copied in by copy_own_experts).
  const std::int64_t es = static_cast<std::int64_t>(size_of(type));
  comm_.all_gather(source, out, static_cast<std::size_t>(s.dense), type, stream);
  if (s.adapters())   // LoRA: the adapters after this rank's experts (shard_layout.hpp)
    comm_.all_gather(static_cast<const char*>(source) + s.trainable_offset * es, static_cast<char*>(out) + s.adapters_at * es,
                     static_cast<std::size_t>(s.trainable), type, stream);
}

void ShardedTrainer::all_gather_unit(int u, const void* source, void* out, DataType type, StreamRef stream) {
  const UnitShard& s = layout_.unit(u);
  if (s.adapters() && !s.expert_parallel()) {   // in this order: the adapters' gather writes over the base's padding
    const std::int64_t es = static_cast<std::int64_t>(size_of(type));
    comm_.all_gather(source, out, static_cast<std::size_t>(s.base), type, stream);
    comm_.all_gather(static_cast<const char*>(source) + s.base * es, static_cast<char*>(out) + s.adapters_begin * es,
                     static_cast<std::size_t>(s.trainable), type, stream);
    return;
  }
  if (!s.expert_parallel()) {
    comm_.all_gather(source, out, static_cast<std::size_t>(s.shard), type, stream);
    return;
  }
  const std::int64_t es = static_cast<std::int64_t>(size_of(type));
  const std::int64_t mine = s.shard - s.dense - (s.adapters() ? s.trainable : 0);
  comm_.all_gather(source, out, static_cast<std::size_t>(s.dense), type, stream);
  comm_.all_gather(static_cast<const char*>(source) + s.dense * es, static_cast<char*>(out) + s.experts_begin * es,
                   static_cast<std::size_t>(mine), type, stream);
  if (s.adapters())   // LoRA: the adapters where the whole unit has them
    comm_.all_gather(static_cast<const char*>(source) + s.trainable_offset * es,
                     static_cast<char*>(out) + s.adapters_begin * es, static_cast<std::size_t>(s.trainable), type,
                     stream);
}

void ShardedTrainer::forward_with_stale_handle_for_test(int u) { compute_forward(last_handle_[u], GatheredUnit{}); }

}  // namespace shardrl
