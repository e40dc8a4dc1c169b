// Fully-sharded data parallelism (ZeRO-3 / FSDP) with an explicit schedule and no hooks
// (DESIGN.md invariants 2, 3, 5). Each rank keeps only its slice of every unit: fp32 main
// weights, a compute-type copy of that slice in bf16 mode (the all-gather source), the main
// gradient slice and the Adam moments. forward_backward() is the visible loop over units:
// gather (the next one prefetched on the communication stream) -> compute -> release, then
// backward in reverse with reduce-scatter into the gradient slices. Every buffer is allocated
// in the constructor and never re-pointed; the optimizer runs on the device.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_stream.hpp"
#include "core/dtype.hpp"
#include "core/ledger_view.hpp"
#include "fsdp/gather_slots.hpp"
#include "fsdp/lookup_rows.hpp"
#include "fsdp/shard_layout.hpp"
#include "fsdp/unit_slices.hpp"
#include "model/token_objective.hpp"
#include "model/transformer.hpp"
#include "mpi/communicator.hpp"
#include "optim/optimizer.hpp"

namespace shardrl {

struct FsdpOptions {
  bool reshard_after_forward = true;
  GradDtype reduce_dtype = GradDtype::fp32;
  GradDtype main_grad_dtype = GradDtype::fp32;
  GradDtype state_dtype = GradDtype::fp32;
  bool decay_norms_and_embeddings = false;
  bool check_released = false;
  bool profile = false;   // fence between phases and time them (slower; for --profile)
  // Keep a frozen copy of the compute-type slices (the KL reference policy), sharded like the
  // policy: 2 (bf16) or 4 (fp32) bytes per parameter per rank / N, in the ledger as weights.
  // A LoRA model keeps none: its reference is the frozen base (the policy's slices, adapters off).
  bool keep_reference = false;
  // Expert parallelism (fsdp.expert_parallel): MoE units are owned expert by expert
  // (ShardLayout); the model must have been built with an ExpertExchange, and without one this
  // is refused rather than ignored.
  bool expert_parallel = false;
  // False for a policy that is only sampled (`evaluate`, `generate`): no gradients, no Adam
  // moments, no gradient buffers and no KL reference (keep_reference is then ignored; 12 of a
  // trained parameter's 16 bytes of state and more);
  // forward_backward and optimizer_step refuse to run.
  bool trains = true;
};

// Whose weights a forward-only pass gathers: the policy's, or the frozen reference's.
enum class WeightSource { policy, reference };

// The per-rank state a checkpoint holds, slice by slice.
enum class SliceState { main, exp_avg, exp_avg_sq, reference };

// Per-step breakdown (seconds only with FsdpOptions::profile) and bytes moved per collective.
struct StepProfile {
  double gather_s = 0, compute_s = 0, reduce_s = 0, optimizer_s = 0;
  // Of gather_s and reduce_s, the embedding's exchanges as rows (fsdp/lookup_rows.hpp), with the
  // kernels that make and add the rows: at the step's start and at the end of backward, where
  // nothing overlaps them, and growing with the tokens rather than the weights.
  double lookup_s = 0;
  std::int64_t all_gathers = 0, all_gather_bytes = 0;
  std::int64_t reduce_scatters = 0, reduce_scatter_bytes = 0;
  std::int64_t all_reduce_bytes = 0;
};

class ShardedTrainer {
 public:
  ShardedTrainer(Transformer& model, Communicator& comm, const FsdpOptions& options,
                 const OptimizerOptions& optimizer);
  ~ShardedTrainer();
  ShardedTrainer(const ShardedTrainer&) = delete;
  ShardedTrainer& operator=(const ShardedTrainer&) = delete;

  // Fresh weights: every rank initialises only its own slices (model/init.hpp), so the model
  // is the same at any world size. Gradients, moments and counters start at zero.
  void initialize(std::uint64_t seed, float std);

  // One micro-batch (set on the model): forward over all units, the objective's dL/dlogp,
  // backward, gradients reduce-scattered and added into the slices.
  void forward_backward(const TokenObjective& objective);
  // Cross-entropy: loss += -scale * sum(mask * logp) on the device.
  void forward_backward(const float* mask, float scale, float* loss);

  // Forward only over the micro-batch set on the model: out[n] = log-probability of token n's
  // target (device, tokens_in_batch() floats) under the policy or the reference, at `temperature`
  // (the distribution logits / temperature).
  void forward_logp(float* out, WeightSource source = WeightSource::policy, float temperature = 1.0f);

  // The reference policy becomes the current weights (needs FsdpOptions::keep_reference; a
  // LoRA model's reference stays its base).
  void snapshot_reference();

  // Global gradient norm (one all-reduce), clipping, non-finite skip, AdamW on every slice,
  // refresh of the compute-type slices, gradients zeroed for the next step.
  void optimizer_step();

  StepMetrics metrics() const { return optimizer_.read_metrics(); }
  void set_peak_lr(float lr) { optimizer_.set_peak_lr(lr); }
  void start_schedule(float lr) { optimizer_.start_schedule(lr); }
  const StepProfile& profile() const { return profile_; }
  void reset_profile() { profile_ = StepProfile{}; }
  // A replayed CUDA graph ran a step's collectives without its host code: count them.
  void add_replayed_profile(const StepProfile& step);
  bool profiling() const { return options_.profile; }   // fences inside the step: not capturable
  const FsdpOptions& options() const { return options_; }
  const OptimizerOptions& optimizer_options() const { return optimizer_.options(); }
  // Every persistent and transient device buffer of the trainer (weights, their compute copies,
  // gradients, moments, reference, gather slots, gradient and receive buffers): fixed from
  // construction on, as a captured step needs.
  std::vector<const void*> buffer_addresses() const;
  const ShardLayout& layout() const { return layout_; }

  // Every unit's full weights in the compute type into out[u] (padded_u elements each): the
  // rollout's materialised weight set. Collective; waits for the gathers.
  void gather_all_units(const std::vector<void*>& out);
  // Unit u's full weights in the compute type into `out` (padded_u elements), enqueued on the
  // model's space (a tensor-parallel rollout's staging, one unit at a time). Collective.
  void gather_unit(int u, void* out);
  // Unit u as a training gather holds it (layout().unit(u).gathered elements): the whole unit,
  // or for an expert-parallel unit its dense part and this rank's experts (the adapters after
  // them), enqueued on the model's space: an expert-parallel rollout's weights. Collective.
  void gather_unit_as_trained(int u, void* out);

  // Checkpoints: this rank's slice of unit u of `state` as fp32 on the host, and back (bf16 state
  // rounds, exactly, since it was bf16; writing the main weights refreshes their compute-type
  // copy). The trainable part of the slice (layout().unit(u).trainable elements: all of it, or
  // with LoRA the adapters'; ShardLayout::state_overlap places a parameter in it); the reference,
  // the whole slice. Synchronise with the device.
  std::vector<float> read_slice(int u, SliceState state) const;
  // The same into state_elements(u, state) floats at `host` (page-locked memory copies at the
  // link's full speed: an asynchronous save's snapshot).
  void copy_slice_to_host(int u, SliceState state, float* host) const;
  void write_slice(int u, SliceState state, const std::vector<float>& values);
  bool keeps_reference() const { return !reference_.empty(); }
  bool lora() const;   // a LoRA model: the adapters train, the base is frozen
  std::int64_t state_elements(int u, SliceState state) const;   // what read_slice returns
  // This rank's whole slice of unit u's weights as fp32 on the host, and back: without LoRA the
  // main weights (as SliceState::main); with LoRA the compute-type base followed by the fp32
  // adapters from layout().unit(u).trainable_offset (ShardLayout::overlap places a parameter in
  // it). Writing refreshes the compute-type copy. What loading a base model writes.
  std::vector<float> read_weights(int u) const;
  void write_weights(int u, const std::vector<float>& values);
  // This rank's slice of unit u's accumulated gradient as fp32 on the host (zeros when nothing
  // was accumulated since the last optimizer step). For inspection and the parity tests.
  std::vector<float> read_gradient_slice(int u) const;
  // Optimizer steps taken and skipped (the schedule's position), as a checkpoint restores them.
  void set_step_counters(std::int64_t step, std::int64_t skipped, std::int64_t schedule_start) {
    optimizer_.set_counters(step, skipped, schedule_start);
  }

  // The full fp32 main weights of unit u on the host (collective; for tests and inspection).
  std::vector<float> gather_main_weights(int u);

  // Test hook for a deliberately wrong schedule: the forward of unit u with whatever handle the
  // schedule last gave it, even if released since. Must stop with an error.
  void forward_with_stale_handle_for_test(int u);

 private:
  void form_lora_slice(int u, float* slice) const;   // read_weights' slice, on the device
  GatheredUnit gather(int u);      // the unit's handle; all-gathers it if not held
  const void* gather_source(int u) const;   // the own slice a gather of u reads (source_)
  // Unit u whole into `out` from every rank's slice `source` (compute type or fp32): one
  // all-gather, or for an expert-parallel unit one of the dense pieces and one of the experts.
  void all_gather_unit(int u, const void* source, void* out, DataType type, StreamRef stream);
  // A training gather of unit u into `out` in two parts: this rank's experts copied from its
  // slice (on the compute space; nothing for a unit without expert parallelism), and the
  // all-gathers of the rest on `stream`.
  void copy_own_experts(int u, const void* source, void* out, DataType type);
  void all_gather_as_trained(int u, const void* source, void* out, DataType type, StreamRef stream);
  void prefetch(int u);            // starts the all-gather of u if a slot is free
  void prefetch_after(int u);      // forward: what to gather while unit u computes
  void release(int u);
  StreamHandle compute_stream() const;
  void compute_forward(const GatheredUnit& w, const GatheredUnit& embedding);
  void compute_backward(const GatheredUnit& w, const GatheredUnit& embedding, float* grads, float* embedding_grads);
  int take_grad_buffer(int unit);   // zeroed for `unit`
  float* gradient_in_place(int unit);   // grads_in_place_: the unit's persistent fp32 slice
  void reduce(int unit, int buffer);
  void reduce_lookup_rows();   // the embedding's own gradient, as rows (lookup_rows_)
  // The embedding's forward from the slices, as rows (lookup_forward_), with unit 1's gather
  // started behind its exchange.
  void forward_lookup_rows();
  void finish_reduce(int buffer);
  bool tied() const;
  DataType compute_data_type() const;   // of the compute slices and what a gather moves
  double now() const;

  Transformer& model_;
  Communicator& comm_;
  FsdpOptions options_;
  ExecSpace space_;
  ShardLayout layout_;
  Optimizer optimizer_;

  // The per-unit state a checkpoint holds as `state` (the reference only when kept).
  const UnitSlices& slices(SliceState state) const;
  // Unit u's own slice in the compute type: what an all-gather of the policy reads.
  const void* compute_slice(int u) const;

  // Persistent, sharded: one buffer per unit, in the type they carry; the trainable state covers
  // the slice's trainable part (all `shard` elements, or with LoRA the adapters' `trainable`).
  UnitSlices main_;        // fp32 main weights (trainable part)
  UnitSlices compute_;     // the own slice in the compute type, the gather source: bf16 mode, and
                           // with LoRA also fp32 mode (the base's only copy); else main_ is gathered
  UnitSlices grad_;        // main gradients (fsdp.main_grad_dtype; trainable part)
  UnitSlices m_, v_;       // Adam moments (optim.state_dtype; trainable part)
  UnitSlices reference_;   // frozen compute-type slices, if kept
  WeightSource source_ = WeightSource::policy; // what gather() reads

  // Transient, allocated once.
  std::unique_ptr<GatherSlots> slots_;
  std::vector<GatheredUnit> last_handle_;      // per unit, for the stale-handle test hook
  LedgerView<float> grad_full_[2];             // full-unit fp32 gradients (padded)
  std::int64_t capacity_[2] = {0, 0};          // padded elements each holds (see the constructor)
  LedgerView<bf16> send_bf16_[2];              // full-unit gradients in bf16, if reduce_dtype bf16
  LedgerView<float> recv_f32_[2];              // reduce-scattered slices
  LedgerView<bf16> recv_bf16_[2];
  bool reduce_in_place_ = false;               // one rank: the buffers above are their own receive buffers
  bool grads_in_place_ = false;                // and none at all: backward writes the slices (constructor)
  // The embedding's lookup exchanged as rows where lookup_as_rows (fsdp/lookup_rows.hpp): its
  // forward (forward_lookup_rows: every rank's tokens and the parts of their rows in each slice),
  // and its own gradient (reduce_lookup_rows: every rank's distinct tokens and their summed rows)
  // where it has one. Both use the same buffers: (ranks, tokens) ids, and (ranks, tokens, d_model)
  // rows, fp32 or, in forward, the compute type.
  bool lookup_forward_ = false;
  bool lookup_rows_ = false;
  LedgerView<std::int32_t> lookup_ids_;
  LedgerView<float> lookup_row_sums_;
  int pending_[2] = {-1, -1};                  // unit whose reduce-scatter is in flight per buffer
  bool received_in_slice_[2] = {false, false}; // and it writes the unit's gradient slice itself (reduce)
  int next_buffer_ = 0;
  // Per unit: its gradient slice holds nothing accumulated since the last optimizer step, so
  // the next reduced slice is copied in (or reduce-scattered into it: reduce) rather than added,
  // and the step need not zero it
  // (saving two passes over every gradient per step). Read before use, it is zeroed first.
  std::vector<char> grad_empty_;

  SideStream comm_stream_;
  std::vector<DeviceEvent> gathered_;          // per slot: its all-gather finished
  DeviceEvent compute_point_, grad_ready_[2], reduced_[2], rows_gathered_, looked_up_;

  StepProfile profile_;
};

}  // namespace shardrl
