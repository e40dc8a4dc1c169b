// A job's policy, built from the one Config exactly once for every entry point (`train`,
// `generate`, `convert --from-safetensors`, the benchmarks, the tests that run jobs): the phase
// arena, the expert exchange (fsdp.expert_parallel), the model, the sharded trainer with fresh
// weights from the seed, and for the train command the RL loop. No other place constructs a
// Transformer and a ShardedTrainer together, so a key cannot take effect on one path and be
// ignored on another (DESIGN.md invariant 1).
//
// Before anything is allocated, the job's memory plan (job/memory_plan.hpp) is checked on every
// rank: a shape or batch that cannot fit is an InputError with the numbers. Then construction
// follows the order the arena needs: every buffer of both phases is reserved
// before the arena is allocated, then the arena enters the train phase and the weights are
// initialised (counter-based on the seed, the same at any world size).
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"
#include "core/phase_arena.hpp"
#include "fsdp/comm_expert_exchange.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "job/memory_plan.hpp"
#include "model/transformer.hpp"
#include "mpi/communicator.hpp"
#include "mpi/layout.hpp"
#include "rl/grpo_loop.hpp"

namespace shardrl {

// With LoRA, the frozen base the adapters belong to, as a checkpoint records it.
struct LoraBase {
  std::string description;   // the seeded random initialisation's keys, or model.init_from's directory
  std::int64_t checksum = -1;   // model.init_from's: its tensors' checksum (job/hf_weights.hpp); -1 random
};

// What the policy is built for, beyond the Config.
struct PolicyUse {
  bool rl_loop = false;   // the train command: the RL loop's generator and staging in the arena
  bool profile = false;   // --profile: the trainer fences between phases and times them
  GenerateShape generator;   // generate: the generator it builds beside the policy, planned with it
  // evaluate and generate: the policy is sampled, never trained (FsdpOptions::trains = false: no
  // gradients or Adam moments; training buffers for one sequence), and the RL loop's task reads
  // its eval split, not rl.dataset.
  bool sampled_only = false;
};

class Policy {
 public:
  // A task's options or dataset that cannot be used, or a job whose memory plan does not fit:
  // InputError (the same on every rank).
  Policy(const Config& config, Communicator& comm, const PolicyUse& use = {});
  ~Policy();
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const Config& config() const { return config_; }
  Communicator& comm() { return comm_; }
  PhaseArena& arena() { return arena_; }
  Transformer& model() { return model_; }
  ShardedTrainer& trainer() { return trainer_; }
  // The RL loop (PolicyUse::rl_loop only).
  GrpoLoop& loop();
  // The RL loop's task fingerprint (GrpoLoop::task_checksum), -1 without the loop.
  std::int64_t task_checksum() const { return loop_ ? loop_->task_checksum() : -1; }

  // Replaces the fresh weights with those of model.init_from's Hugging Face directory
  // (job/hf_weights.hpp); with LoRA that is the frozen base, and the adapters come from
  // lora.init_from's PEFT directory where it is set and `adapters` (a fresh start: a checkpoint
  // loaded after holds the adapters, and lora.init_from is not read again; job/peft_adapter.hpp),
  // else keep their fresh values. Collective over `world`, the ranks of the policy's communicator.
  void load_init_from(MPI_Comm world, bool adapters);
  // A LoRA job whose base is model.init_from's: it must be loaded before any checkpoint, which
  // holds the adapters only.
  bool base_from_init_from() const { return config_.lora.rank > 0 && !config_.model.init_from.empty(); }
  const LoraBase& lora_base() const { return lora_base_; }

  // The paths this build takes, one "name: value" per line: what --print-build and the start-up
  // report show, read from the built objects (not from the Config), so a key that did not reach
  // them shows its default here.
  std::string build_report() const;

 private:
  ModelOptions placed_model_options();
  Communicator* tensor_parallel_group();
  std::unique_ptr<DeviceAllocation> arena_storage();   // null: the arena allocates its own

  const Config config_;
  Communicator& comm_;
  PhaseArena arena_;
  std::unique_ptr<CommExpertExchange> expert_exchange_;   // fsdp.expert_parallel with MoE layers
  // rollout.tensor_parallel > 1: the ranks of this rank's group (consecutive world ranks).
  MpiComm tensor_parallel_mpi_;
  std::unique_ptr<Communicator> tensor_parallel_;
  Transformer model_;
  ShardedTrainer trainer_;
  std::unique_ptr<GrpoLoop> loop_;
  LoraBase lora_base_;
};

}  // namespace shardrl
