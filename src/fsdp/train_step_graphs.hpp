// One optimizer step (every micro-batch's forward and backward with their all-gathers and
// reduce-scatters, the gradient-norm all-reduce and the optimizer) captured as one CUDA graph
// per bucket and replayed every step: train.cuda_graph = "full", DESIGN.md invariant 3.
//
// A graph replays fixed addresses, so everything a step reads from the host side must already
// be on the device before the launch: the caller fills a micro-batch's inputs (the model's batch
// buffers, the objective's) as in an eager step, and stage(m) copies them into slot m; inside
// the graph, micro-batch m first copies slot m back. The learning rate, step count, clip scale
// and skip flag live on the device (optim/optimizer.hpp). A bucket is (name, micro-batch count,
// the model's batch shape, the objective's buffers and constants): a new one runs eagerly once,
// is captured at its second step and replayed from then on, across rollouts and after a
// checkpoint is loaded into the same buffers. The addresses of the trainer's buffers and of the
// inputs are checked at every step.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/captured_graph.hpp"
#include "core/device_region.hpp"
#include "fsdp/sharded_trainer.hpp"

namespace shardrl {

class TrainStepGraphs {
 public:
  // `inputs`: besides the model's batch buffers, the objective's per-token inputs; room for up
  // to `max_micro_batches` micro-batches per step. On CPU builds (no graphs) only with
  // `host_replay_for_tests`, which re-runs the step's code at every replay.
  TrainStepGraphs(ShardedTrainer& trainer, Transformer& model, std::vector<DeviceRegion> inputs, int max_micro_batches,
                  bool host_replay_for_tests = false);

  // After the caller filled micro-batch m's inputs: keeps a copy of them for the step.
  void stage(int m);
  // One optimizer step over the staged micro-batches 0..micro_batches-1: a bucket's first step
  // runs eagerly (see the .cpp), its second is captured, and every one after is replayed.
  void step(const std::string& bucket, int micro_batches, const TokenObjective& objective);

  int captures() const { return captures_; }   // graphs captured so far
  int replays() const { return replays_; }     // steps run as a graph (the captured one included)

 private:
  struct Graph {
    bool warmed_up = false;               // its first step ran eagerly
    CapturedGraph graph;                  // captured at its second step
    std::vector<const void*> addresses;   // at the first step: must not change
    StepProfile profile;                  // what one step adds to the host-side counters
    WgradCounters wgrad;
    GemmCounters gemm;
  };
  std::vector<const void*> addresses() const;
  void load(int m);   // slot m back into the input buffers (inside the graph)

  ShardedTrainer& trainer_;
  Transformer& model_;
  std::vector<DeviceRegion> inputs_;
  std::size_t slot_bytes_ = 0;
  int max_micro_batches_;
  LedgerView<char> slots_;   // max_micro_batches slots of every input, back to back
  std::map<std::string, Graph> graphs_;
  const TokenObjective* objective_ = nullptr;   // the current step's (host replay reads it)
  int micro_batches_ = 0;
  int captures_ = 0, replays_ = 0;
};

}  // namespace shardrl
