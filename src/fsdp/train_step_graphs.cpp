#include "fsdp/train_step_graphs.hpp"

#include <fmt/format.h>

#include "core/device_stream.hpp"
#include "core/error.hpp"

namespace shardrl {
namespace {

using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

void copy_bytes(const ExecSpace& space, void* dst, const void* src, std::size_t n) {
  Kokkos::deep_copy(space, Bytes(static_cast<char*>(dst), n), Bytes(static_cast<char*>(const_cast<void*>(src)), n));
}

StepProfile minus(StepProfile a, const StepProfile& b) {
  a.all_gathers -= b.all_gathers;
  a.all_gather_bytes -= b.all_gather_bytes;
  a.reduce_scatters -= b.reduce_scatters;
  a.reduce_scatter_bytes -= b.reduce_scatter_bytes;
  a.all_reduce_bytes -= b.all_reduce_bytes;
  return a;
}

}  // namespace

TrainStepGraphs::TrainStepGraphs(ShardedTrainer& trainer, Transformer& model, std::vector<DeviceRegion> inputs,
                                 int max_micro_batches, bool host_replay_for_tests)
    : trainer_(trainer), model_(model), inputs_(std::move(inputs)), max_micro_batches_(max_micro_batches) {
  SHARDRL_CHECK(CapturedGraph::native() || host_replay_for_tests,
                "train.cuda_graph = \"full\" needs a CUDA build (the config check should have said so)");
  SHARDRL_CHECK(!trainer_.profiling(),
                "a step timed phase by phase (--profile) fences inside itself and cannot be captured");
  SHARDRL_CHECK(max_micro_batches_ >= 1, "room for at least one micro-batch");
  for (const DeviceRegion& b : model_.batch_inputs()) inputs_.push_back(b);
  for (const DeviceRegion& b : inputs_) slot_bytes_ += b.bytes;
  slots_ = LedgerView<char>(MemoryCategory::workspace, "step_graph_inputs",
                            slot_bytes_ * static_cast<std::size_t>(max_micro_batches_));
}

std::vector<const void*> TrainStepGraphs::addresses() const {
  std::vector<const void*> out = trainer_.buffer_addresses();
  for (const DeviceRegion& b : model_.batch_inputs()) out.push_back(b.data);
  return out;
}

void TrainStepGraphs::stage(int m) {
  SHARDRL_CHECK(m >= 0 && m < max_micro_batches_,
                fmt::format("micro-batch {} of a step graph with room for {}", m, max_micro_batches_));
  std::size_t offset = slot_bytes_ * static_cast<std::size_t>(m);
  for (const DeviceRegion& b : inputs_) {
    copy_bytes(model_.space(), slots_.data() + offset, b.data, b.bytes);
    offset += b.bytes;
  }
}

void TrainStepGraphs::load(int m) {
  std::size_t offset = slot_bytes_ * static_cast<std::size_t>(m);
  for (const DeviceRegion& b : inputs_) {
    copy_bytes(model_.space(), b.data, slots_.data() + offset, b.bytes);
    offset += b.bytes;
  }
}

void TrainStepGraphs::step(const std::string& bucket, int micro_batches, const TokenObjective& objective) {
  SHARDRL_CHECK(micro_batches >= 1 && micro_batches <= max_micro_batches_,
                fmt::format("a step of {} micro-batches; the graphs hold 1 to {}", micro_batches, max_micro_batches_));
  objective_ = &objective;
  micro_batches_ = micro_batches;
  const std::string key = fmt::format("{} | {} micro-batches of {} x {} | {}", bucket, micro_batches,
                                      model_.batch_rows(), model_.batch_seq_len(), objective.identity());
  const StreamHandle stream = stream_handle(model_.space());
  auto run_step = [this] {   // reads objective_ and micro_batches_ when it runs
    for (int m = 0; m < micro_batches_; ++m) {
      load(m);
      trainer_.forward_backward(*objective_);
    }
    trainer_.optimizer_step();
  };
  Graph& g = graphs_[key];
  if (!g.warmed_up) {
    // A new bucket's first step runs eagerly: what a first launch does once (loading kernels,
    // Kokkos' first copy of its lock arrays per source file, growing its scratch, cuBLAS
    // choosing kernels) must not happen during capture, where it would be illegal.
    run_step();
    g.warmed_up = true;
    g.addresses = addresses();
    return;
  }
  SHARDRL_CHECK(addresses() == g.addresses,
                "a buffer of the train step was re-pointed since its bucket first ran (bucket " + key + ")");
  if (!g.graph.captured()) {
    const StepProfile profile = trainer_.profile();
    const WgradCounters wgrad = model_.wgrad_counters();
    const GemmCounters gemm = model_.gemm().counters();
    g.graph.capture(stream, run_step);
    g.profile = minus(trainer_.profile(), profile);
    g.wgrad = WgradCounters{model_.wgrad_counters().fused - wgrad.fused, model_.wgrad_counters().unfused - wgrad.unfused};
    g.gemm = GemmCounters{model_.gemm().counters().calls - gemm.calls, model_.gemm().counters().flops - gemm.flops};
    ++captures_;
    g.graph.replay(stream);   // a native capture counted its host side once: this step's
  } else {
    g.graph.replay(stream);
    if (CapturedGraph::native()) {
      trainer_.add_replayed_profile(g.profile);
      model_.add_replayed_counts(g.wgrad);
      model_.gemm().add_replayed_counts(g.gemm);
    }
  }
  ++replays_;
}

}  // namespace shardrl
