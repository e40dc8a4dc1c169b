// The two phases of an RL iteration and the supervised warm-up, as plain functions that the
// job calls in a loop (DESIGN.md "What a job does", invariant 4): everything they use is built
// once in the constructor (the generator, the rollout's weight set and the staging buffers,
// placed in the job's PhaseArena), and entering a phase only hands the arena over.
//
// The global batch is fixed by the seed: iteration i's prompts are the task's examples
// (seed, i, 0 .. P-1); minibatch k holds prompts [k P/K, (k+1) P/K), and each minibatch is split
// across the ranks (rollout/batch_split.hpp), so every optimizer step sees its whole minibatch
// at any world size. Loss weights are normalised over the global minibatch, so the gradient
// summed by the reduce-scatter is the same at np 1, 2 or 4.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/phase_arena.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "fsdp/train_step_graphs.hpp"
#include "mpi/communicator.hpp"
#include "rl/grpo.hpp"
#include "rl/loss_choices.hpp"
#include "rl/sampled_group.hpp"
#include "rl/sequence.hpp"
#include "rl/task.hpp"
#include "rollout/comm_tensor_parallel.hpp"
#include "rollout/generator.hpp"
#include "rollout/sampling.hpp"
#include "rollout/stop_ids.hpp"
#include "rollout/weight_set.hpp"

namespace shardrl {

// What one rollout produced on this rank, and its global statistics.
struct RolloutBatch {
  std::int64_t iteration = 0;
  std::vector<Sequence> sequences;          // this rank's rows, minibatch after minibatch, groups whole
  std::vector<int> minibatch_begin;         // K + 1 row offsets into `sequences`
  std::vector<std::vector<float>> logp;     // per row: the sampler's log-probability of each completion token
  std::vector<double> reward;               // per row: the task's reward plus the overlong penalty
  std::vector<char> trained;                // per row: 0 when rl.overlong = "filter" drops it (truncated)
  std::vector<double> minibatch_tokens;     // global completion tokens trained on, per minibatch
  std::vector<double> minibatch_sequences;  // global completions trained on, per minibatch
  // Over all ranks and every completion drawn (all sampling rounds):
  double reward_mean = 0, reward_std = 0, pass_rate = 0, response_len_mean = 0;
  double entropy = 0;                       // mean entropy of the distributions the completion tokens were drawn from
  double tokens = 0;                        // completion tokens generated
  std::int64_t sampling_rounds = 1;         // rounds of P prompts drawn (rl.dynamic_sampling)
  std::int64_t groups_dropped = 0;          // uninformative groups left out of the batch
  double seconds = 0;
};

struct TrainStats {
  double loss = 0, kl = 0, clip_frac = 0, grad_norm = 0, lr = 0;
  // exp(training forward's logp - sampler's logp) over the completion tokens, before any update:
  // kernels and precision differ between the sampler and the training forward.
  double rollout_train_ratio_mean = 1, rollout_train_ratio_max = 1;
  double aux_loss = 0;                      // MoE load-balancing loss, summed over layers (0: dense)
  std::int64_t skipped = 0;                 // optimizer steps skipped (non-finite gradients)
  double tokens = 0;                        // non-padding tokens trained on, over all ranks
  double seconds = 0;
};

// An evaluation on the task's held-out split (GrpoLoop::evaluate), over all ranks.
struct EvalStats {
  std::int64_t prompts = 0;   // 0: the task has no eval split (nothing was run)
  int k = 0;                  // samples per prompt of pass@k and mean@k
  double reward_mean = 0;     // greedy completions' mean reward
  double pass_at_1 = 0;       // fraction of prompts whose greedy completion passes (rl/scored.hpp)
  double pass_at_k = 0;       // fraction of prompts with a sample (of k) that passes
  double mean_at_k = 0;       // mean reward of the k samples
  double seconds = 0;
};

// What the loop runs: the [rl] and [rollout] keys and the seed, as the job's Config gives them
// (job/options.hpp fills this from the Config; nothing here is read from anywhere else).
struct GrpoLoopOptions {
  TaskOptions task;
  std::uint64_t seed = 0;                     // run.seed: prompts, samples, warm-up examples
  int prompts_per_iteration = 16;             // global, split into the minibatches
  int samples_per_prompt = 8;                 // G
  int minibatches = 1;                        // optimizer steps per rollout
  std::int64_t sft_batch_size = 32;           // global demonstrations per warm-up step
  std::int32_t eos_id = 257;                  // ends completions and demonstrations
  SamplingOptions sampling;
  int max_new_tokens = 64;
  bool short_rows = true;                     // train.packing: RL train rows as long as a minibatch needs
  bool packing = true;                        // and several sequences to a row (dense models)
  bool decode_graphs = false;                 // rollout.cuda_graph = "decode"
  EngineOptions engine;                       // rollout.engine, rollout.kv_cache_tokens
  bool train_graph = false;                   // train.cuda_graph = "full"
  AdvantageEstimator advantage_estimator = AdvantageEstimator::grpo;
  bool scale_by_std = true;                   // grpo: advantages divided by the group's std
  double adv_eps = 1e-6;
  GrpoLossOptions loss;                       // clip range, KL weight (0: no reference) and estimator, entropy
  bool kl_in_reward = false;                  // the KL (loss.kl_coef, loss.kl_estimator) as a token reward
  LossAggregation loss_aggregation = LossAggregation::token;
  int loss_tokens = 0;                        // constant aggregation: tokens per completion (0: max_new_tokens)
  OldLogp old_logp = OldLogp::recompute;
  float tis_cap = 0.0f;                       // truncated importance sampling cap (0: off)
  bool dynamic_sampling = false;              // drop uninformative groups, draw more prompts
  int max_sampling_rounds = 4;
  Overlong overlong = Overlong::none;
  int overlong_buffer = 0;                    // soft: tokens before max_new_tokens where the penalty grows
  int eval_samples = 4;                       // rl.eval_samples: k of pass@k
};

// A rollout or evaluation given up on every rank because the abandon check asked for it
// (GrpoLoop::abandon_rollouts_when): nothing of the iteration has been kept, so the job's state
// is the one it began the iteration with.
struct RolloutAbandoned : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class GrpoLoop {
 public:
  // Builds the generator and the weight set in the arena's rollout region: call before commit().
  // `tensor_parallel`: the communicator of this rank's rollout.tensor_parallel group (consecutive
  // ranks), whose ranks then decode one model together; null: each rank decodes alone.
  GrpoLoop(const GrpoLoopOptions& options, Transformer& model, ShardedTrainer& trainer, Communicator& comm,
           PhaseArena& arena, Communicator* tensor_parallel = nullptr);
  ~GrpoLoop();

  // One optimizer step of cross-entropy on the task's demonstrations (examples of seed + 1),
  // each followed by EOS (rl.eos_id).
  TrainStats warmup_step(std::int64_t step);
  // Every demonstration the warm-up can draw fits a row (a dataset's every line, a generated
  // task's longest): an InputError naming the line on every rank alike otherwise. Called before
  // a warm-up runs, so a long solution stops the job then, not at the step that draws it.
  void check_demonstrations() const;
  // Generate G completions (until an end id: rl.eos_id, or the task's end_ids) for this rank's
  // prompts of the iteration and score them (rl.dynamic_sampling: in rounds, until the batch
  // holds only informative groups or the rounds run out). Advantages are the train phase's (they
  // may need the KL). A pre-tokenized example with an id beyond model.vocab_size stops every
  // rank with an InputError naming its dataset line (the warm-up checks its examples alike).
  RolloutBatch rollout(std::int64_t iteration);
  // The old (and reference) log-probabilities, the advantages, then K optimizer steps of the
  // policy-gradient objective on the batch.
  TrainStats train(const RolloutBatch& batch);
  // Generates on the task's whole eval split (split across the ranks): one greedy completion and
  // rl.eval_samples sampled ones per prompt. Collective. A task without an eval split: prompts = 0.
  EvalStats evaluate();
  // A check, the same on every rank (a stop that leaves no time to finish the iteration), that
  // gives up a rollout or evaluation: the generator cuts its decode steps short when it says so
  // (under rollout.tensor_parallel, whose ranks run each other's steps, when it says so on any
  // rank of the group: they agree before every step), and after each generate call the ranks
  // agree on it; then rollout() and evaluate() throw RolloutAbandoned on every rank. Scoring that
  // waits on a reward process fails when it says so (Task::give_up_scoring_when: an InputError,
  // agreed like any scoring failure). The train phase is never given up (its optimizer steps
  // change the state).
  void abandon_rollouts_when(std::function<bool()> check);
  // Called at each micro-batch and optimizer step of the train phase (the abandon check above is
  // asked before every decode step and while scoring waits): the signs of progress by which the
  // job's watchdog bounds a long phase step by step rather than whole.
  void progress_with(std::function<void()> progress) { progress_ = std::move(progress); }

  const GrpoLoopOptions& options() const { return options_; }
  // Whether decode steps replay captured graphs (rollout.cuda_graph = "decode").
  bool decode_graphs() const;
  // What this rank's last generate call did (for tests).
  const GenerationStats& last_generation() const { return generator_->last_stats(); }
  // The captured train steps (train.cuda_graph = "full"), else null.
  const TrainStepGraphs* step_graphs() const { return step_graphs_.get(); }
  // The task files' fingerprint (rl/task_checksum.hpp; -1 for a generated task): what a
  // checkpoint records and a resume compares. Computed once, at construction, where the ranks'
  // values are checked to agree.
  std::int64_t task_checksum() const { return task_checksum_; }

 private:
  struct Staging;
  void set_micro_batch(const std::vector<Sequence>& seqs, int first, int end);
  // Micro-batch m's inputs are set: run its forward and backward now, or stage it for the step.
  void micro_batch_ready(int m, const TokenObjective& objective);
  // The optimizer step after micro-batches 0..count-1 (eager, or the step's graph).
  void finish_step(const char* bucket, int count, const TokenObjective& objective);
  double sum_over_ranks(std::vector<double>& values);   // in place; returns values[0]
  // Rewards of completions row by row, with their passes (a pre-tokenized task's in one call).
  std::vector<Scored> score(const std::vector<TaskExample>& examples, const std::vector<Completion>& out) const;
  // score(), with a failure on any rank (a reward process that crashed there) stopping every rank
  // with its message. Collective.
  std::vector<Scored> agreed_score(const std::vector<TaskExample>& examples, const std::vector<Completion>& out) const;
  // One round of P prompts (draw-order indices round * P + position): this rank's share of each
  // minibatch, generated and scored. Adds reward, reward^2, passes, entropy and tokens of every
  // completion into sums[0..5).
  std::vector<SampledGroup> draw_round(std::int64_t iteration, int round, std::vector<double>& sums);
  // An example's prompt ids, their length checked against the rows and the generator (InputError
  // naming its dataset line and `which` prompt it is).
  std::vector<std::int32_t> checked_prompt(const TaskExample& ex, const std::string& which) const;
  // After a generate call, on every rank: throws RolloutAbandoned if on any rank the call was
  // cut short (`cut_short`: this rank's) or the abandon check holds. Collective where there is a
  // check.
  void leave_if_abandoned(bool cut_short, const char* what) const;
  // Moves the chosen groups (draw-order indices, in batch order) to the ranks that train them:
  // batch slot q belongs to minibatch q / (P/K) and to the rank holding position q % (P/K) of it.
  // Returns this rank's groups in slot order. Collective.
  std::vector<SampledGroup> gather_batch(std::vector<SampledGroup>& drawn, const std::vector<std::int64_t>& chosen);
  // Per row and token: the advantages of the batch under rl.advantage_estimator, given the old
  // and reference log-probabilities (for a KL in the reward). Collective (REINFORCE++ whitens
  // over the global batch).
  std::vector<std::vector<float>> advantages(const RolloutBatch& b, const std::vector<std::vector<float>>& old_logp,
                                             const std::vector<std::vector<float>>& ref_logp);

  const GrpoLoopOptions options_;
  Transformer& model_;
  ShardedTrainer& trainer_;
  Communicator& comm_;
  PhaseArena& arena_;
  std::unique_ptr<Task> task_;
  std::int64_t task_checksum_ = -1;
  int prompts_per_minibatch_, group_, minibatches_, micro_rows_, seq_len_, gen_len_;
  std::int32_t eos_id_;   // rl.eos_id, or the task's (the byte tokenizer's EOS) when unset
  StopIds stop_ids_;      // eos_id_, and the task's other end ids in the vocabulary
  // Fills unused positions: the byte tokenizer's PAD, or for a pre-tokenized dataset EOS (PAD
  // 258 may be beyond a small vocabulary; padded positions are masked either way).
  std::int32_t pad_id_;
  std::unique_ptr<CommTensorParallel> tensor_parallel_;   // rollout.tensor_parallel > 1
  std::unique_ptr<WeightSet> weights_;
  std::unique_ptr<Generator> generator_;
  std::function<bool()> abandon_;   // abandon_rollouts_when
  std::function<void()> progress_;  // progress_with
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<TrainStepGraphs> step_graphs_;   // train.cuda_graph = "full"
};

}  // namespace shardrl
