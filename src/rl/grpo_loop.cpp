// The RL loop: construction, the warm-up and the train phase (advantages, the old and reference
// forwards, packed micro-batches, the optimizer steps). Rollout and evaluation: grpo_loop_rollout.cpp.
#include "rl/grpo_loop.hpp"

#include "mpi/host_exchange.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "rl/advantage.hpp"
#include "rl/grpo_objective.hpp"
#include "rl/grpo_loop_internal.hpp"
#include "rl/task_checksum.hpp"
#include "rollout/batch_split.hpp"
#include "rollout/comm_tensor_parallel.hpp"

namespace shardrl {
namespace {

// Packed rows are as long as the minibatch's longest sequence, rounded up to this: few distinct
// batch shapes (each a captured step of its own with train.cuda_graph = "full").
constexpr int kRowGranule = 32;

}  // namespace

using namespace grpo_loop_detail;

// Device inputs of one micro-batch, allocated once (micro_batch_size x seq_len each), in the
// ledger as workspace.
struct GrpoLoop::Staging {
  LedgerView<float> mask, old_logp, ref_logp, advantage, weight, is_weight, logp;   // (n) each
  LedgerView<float> stats;    // (kGrpoStats): the GRPO loss's sums
  LedgerView<float> loss;     // (1)
  LedgerView<double> reduce;  // (reduced): the values one sum_over_ranks call adds up
  Kokkos::View<float*, MemSpace>::HostMirror mask_h, old_h, ref_h, adv_h, weight_h, is_h, logp_h, stats_h, loss_h;
  Kokkos::View<double*, MemSpace>::HostMirror reduce_h;
  // n: positions of a micro-batch; reduced: the most values one sum_over_ranks call adds up.
  Staging(std::size_t n, std::size_t reduced)
      : mask(kCategory, "mask", n), old_logp(kCategory, "old_logp", n), ref_logp(kCategory, "ref_logp", n),
        advantage(kCategory, "advantage", n), weight(kCategory, "weight", n), is_weight(kCategory, "is_weight", n),
        logp(kCategory, "logp", n),
        stats(kCategory, "grpo_stats", kGrpoStats), loss(kCategory, "loss", 1), reduce(kCategory, "metrics", reduced) {
    mask_h = Kokkos::create_mirror_view(mask.view());
    old_h = Kokkos::create_mirror_view(old_logp.view());
    ref_h = Kokkos::create_mirror_view(ref_logp.view());
    adv_h = Kokkos::create_mirror_view(advantage.view());
    weight_h = Kokkos::create_mirror_view(weight.view());
    is_h = Kokkos::create_mirror_view(is_weight.view());
    logp_h = Kokkos::create_mirror_view(logp.view());
    stats_h = Kokkos::create_mirror_view(stats.view());
    loss_h = Kokkos::create_mirror_view(loss.view());
    reduce_h = Kokkos::create_mirror_view(reduce.view());
  }
  static constexpr MemoryCategory kCategory = MemoryCategory::workspace;
};

namespace {

// The task reads its files (dataset, tokenizer, chat template) on every rank. A rank that cannot
// (a node-local path missing on another node, a file it may not read) must not leave the others
// in the set-up's collectives until comm.timeout_s with the cause unprinted: every rank stops
// here with the message of the lowest failing rank.
// An error that is not the input's (out of memory, a bug) stays a fatal error on every rank.
std::unique_ptr<Task> make_task_on_every_rank(const TaskOptions& options, Communicator& comm) {
  std::unique_ptr<Task> task;
  std::string problem;
  bool unexpected = false;
  try {
    task = make_task(options);
  } catch (const InputError& e) {
    problem = e.what();
  } catch (const std::bad_alloc&) {
    problem = "out of host memory reading the task's files (std::bad_alloc)";
    unexpected = true;
  } catch (const std::exception& e) {
    problem = fmt::format("unexpected error setting up the task: {}", e.what());
    unexpected = true;
  }
  unexpected = any_rank(comm.host_comm(), unexpected);
  try {
    agree_on_error(comm.host_comm(), problem);
  } catch (const InputError& e) {
    if (unexpected) SHARDRL_FATAL(e.what());
    throw;
  }
  return task;
}

}  // namespace

GrpoLoop::GrpoLoop(const GrpoLoopOptions& options, Transformer& model, ShardedTrainer& trainer, Communicator& comm,
                   PhaseArena& arena, Communicator* tensor_parallel)
    : options_(options), model_(model), trainer_(trainer), comm_(comm), arena_(arena),
      task_(make_task_on_every_rank(options.task, comm)), prompts_per_minibatch_(options.prompts_per_iteration / options.minibatches),
      group_(options.samples_per_prompt), minibatches_(options.minibatches),
      micro_rows_(model.options().max_batch), seq_len_(model.options().max_seq_len),
      gen_len_(std::min(seq_len_ + 1, model.options().shape.max_seq_len)),
      eos_id_(options.eos_id >= 0 ? options.eos_id : task_->eos_id()),
      stop_ids_(eos_id_, task_->end_ids(), model.options().shape.vocab_size),
      pad_id_(task_->pre_tokenized() ? eos_id_ : tokenizer::kPad) {
  // Every rank read its own copy of the task's files (a node-local copy may be stale): they must
  // be the same, or the ranks would train on different examples and the checkpoint record one
  // rank's. A rank whose copy differs is named on every rank, before the checks below (which a
  // differing copy could fail on one rank alone).
  // So must the evaluation's (each rank scores its share of them: a rank with another copy
  // measured other prompts or made other collectives than its peers).
  std::int64_t mine[2] = {0, 0};
  run_on_every_rank(comm.host_comm(), [&] {
    task_checksum_ = shardrl::task_checksum(*task_);
    mine[0] = task_checksum_;
    mine[1] = shardrl::eval_checksum(*task_);
  });
  std::vector<std::int64_t> checksums(2 * static_cast<std::size_t>(comm.size()));
  MPI_Allgather(mine, 2, MPI_INT64_T, checksums.data(), 2, MPI_INT64_T, comm.host_comm());
  for (std::size_t r = 1; r < static_cast<std::size_t>(comm.size()); ++r) {
    if (checksums[2 * r] != checksums[0])
      throw InputError(fmt::format("rank {} read other task files than rank 0 (their checksums {:08x} and {:08x}: "
                                   "the dataset{}): every rank must read the same files (a stale node-local copy?)",
                                   r, checksums[2 * r], checksums[0],
                                   options.task.name == "text" ? " or the tokenizer's files" : " file"));
    if (checksums[2 * r + 1] != checksums[1])
      throw InputError(fmt::format("rank {} read another rl.eval_dataset than rank 0 (checksums {:08x} and {:08x}): "
                                   "every rank must read the same file (a stale node-local copy?)",
                                   r, checksums[2 * r + 1], checksums[1]));
  }
  // The same on every rank. (A generated task is refused earlier, by the config's checks.)
  if (!task_->pre_tokenized() && model.options().shape.vocab_size < tokenizer::kVocabSize)
    throw InputError(fmt::format(
        "model.vocab_size = {} is too small for {}: its text is encoded by the byte tokenizer, whose ids go up to "
        "{} (model.vocab_size >= {}, or a pre-tokenized dataset)",
        model.options().shape.vocab_size,
        options.task.dataset_path.empty() ? fmt::format("rl.task = \"{}\"", options.task.name)
                                          : fmt::format("the dataset '{}'", options.task.dataset_path),
        tokenizer::kVocabSize - 1, tokenizer::kVocabSize));
  // The end-of-completion id ends completions, pads rows and targets the warm-up's last token:
  // one past the model's vocabulary would index past the embedding and the head. rl.eos_id is
  // range-checked with the config; the tokenizer's own (a dataset's task) only here.
  if (eos_id_ >= model.options().shape.vocab_size)
    throw InputError(fmt::format("the end-of-completion id {} ({}) is outside the model's vocabulary "
                                 "(model.vocab_size = {}): set model.vocab_size above it, or rl.eos_id",
                                 eos_id_, options.eos_id >= 0 ? "rl.eos_id" : "the tokenizer's eos token",
                                 model.options().shape.vocab_size));
  // A dataset's examples, each checked once here on every rank alike (its ids in the vocabulary,
  // its prompt with room for a completion): a bad line stops the job before the warm-up or any
  // rollout spends compute, not at the iteration whose batch first draws it.
  task_->for_each_dataset_example([&](const TaskExample& ex) {
    check_ids_in_vocabulary(ex, model.options().shape.vocab_size, "every line is checked when the job starts");
    checked_prompt(ex, "its prompt (every line is checked when the job starts)");
  });
  // The eval split's too: a prompt the model cannot take stops every rank alike at the start, not
  // at the first evaluation after iterations of compute.
  for (std::int64_t i = 0; i < task_->eval_count(); ++i) {
    const TaskExample ex = task_->eval_example(i);
    check_ids_in_vocabulary(ex, model.options().shape.vocab_size, "every eval line is checked when the job starts");
    checked_prompt(ex, "its eval prompt (every eval line is checked when the job starts)");
  }
  // A generated task's longest prompt, likewise (the warm-up ran before the first rollout found it).
  if (TaskExample longest; !(longest.prompt = task_->longest_prompt()).empty())
    checked_prompt(longest, fmt::format("the longest prompt of rl.task = \"{}\" at rl.difficulty = {}",
                                        task_->name(), options.task.difficulty));
  // A generated task's answers that a completion cannot hold: such prompts earn nothing.
  if (const std::string answer = task_->longest_demonstration(); !answer.empty()) {
    const std::size_t needs = tokenizer::encode(answer).size() + 1;   // and its EOS
    if (static_cast<std::int64_t>(needs) > options.max_new_tokens)
      spdlog::warn("rl.task = \"{}\" at rl.difficulty = {}: the longest answer and its EOS take {} tokens, more "
                   "than rollout.max_new_tokens = {}: completions cannot hold it, so those prompts earn no reward",
                   task_->name(), options.task.difficulty, needs, options.max_new_tokens);
  }
  // A reward command that ended as it started (a script not found, an import that failed) is
  // said now on every rank, not after a warm-up and a rollout when the first batch finds it.
  run_on_every_rank(comm.host_comm(), [&] { task_->check_scorer(); });
  const ArenaPlacement rollout{&arena, Phase::rollout};
  if (tensor_parallel != nullptr && tensor_parallel->size() > 1) {
    // The group's ranks generate the prompts of all of them, each computing its part of every
    // layer (model/tensor_parallel.hpp).
    const int T = tensor_parallel->size();
    tensor_parallel_ = std::make_unique<CommTensorParallel>(*tensor_parallel, model.space());
    ModelOptions part = model.options();
    part.shape = tensor_parallel_shape(part.shape, T);
    part.tensor_parallel = tensor_parallel_.get();
    weights_ = std::make_unique<WeightSet>(trainer.layout(), model, model_units(part.shape), tensor_parallel->rank(), T,
                                           model.compute_type_size(), rollout);
    const int rows = minibatches_ * ceil_div(prompts_per_minibatch_, comm.size()) * group_ * T;
    generator_ = std::make_unique<Generator>(part, rows, gen_len_, model.space(), &arena, options.engine);
    // LoRA: the whole units' adapters are folded with the decoder's GEMMs (WeightSet).
    if (model.options().shape.lora.on())
      for (const UnitSpec& unit : model.units())
        for (const ParamSpec& p : unit.params)
          if (p.shape.size() == 2) generator_->model().gemm().reserve(p.shape[0], p.shape[1], model.options().shape.lora.rank);
  } else {
    // rollout.expert_parallel: the set holds each MoE layer as training gathers it (the dense
    // part and this rank's experts), and the generator decodes with the training's exchange.
    const int rows = minibatches_ * ceil_div(prompts_per_minibatch_, comm.size()) * group_;
    SHARDRL_CHECK(!options.engine.expert_parallel || model.options().expert_exchange != nullptr,
                  "rollout.expert_parallel needs the model built with fsdp.expert_parallel (the config checks it)");
    weights_ = std::make_unique<WeightSet>(trainer.layout(), model.compute_type_size(), rollout,
                                           options.engine.expert_parallel ? WeightSet::Experts::own
                                                                          : WeightSet::Experts::all);
    generator_ = std::make_unique<Generator>(model.options(), rows, gen_len_, model.space(), &arena, options.engine);
  }
  if (options.decode_graphs) generator_->use_decode_graphs();
  // The sums reduced over the ranks: the rollout's 5 statistics and each minibatch's token and
  // completion counts, the train phase's 8 statistics, the warm-up's loss.
  const std::size_t reduced = std::max<std::size_t>(8, 5 + 2 * static_cast<std::size_t>(minibatches_));
  staging_ = std::make_unique<Staging>(std::size_t(micro_rows_) * seq_len_, reduced);
  if (options.train_graph) {
    // A captured step's shapes are fixed: the head runs on every token, not on the scored ones.
    model.score_every_token(true);
    if (trainer.profiling())
      throw InputError("train.cuda_graph = \"full\" and --profile: the profile fences between the phases of a "
                       "step, which a captured step cannot do (profile with train.cuda_graph = \"none\")");
    Staging& st = *staging_;
    std::vector<DeviceRegion> inputs;
    for (auto* v : {&st.mask, &st.old_logp, &st.ref_logp, &st.advantage, &st.weight, &st.is_weight})
      inputs.push_back(DeviceRegion{v->data(), v->size() * sizeof(float)});
    const int rl_micro = ceil_div(ceil_div(prompts_per_minibatch_, comm.size()) * group_, micro_rows_);
    const int sft_micro = ceil_div(ceil_div(options.sft_batch_size, comm.size()), micro_rows_);
    step_graphs_ = std::make_unique<TrainStepGraphs>(trainer, model, std::move(inputs), std::max(rl_micro, sft_micro));
  }
}

void GrpoLoop::micro_batch_ready(int m, const TokenObjective& objective) {
  if (step_graphs_) step_graphs_->stage(m);
  else trainer_.forward_backward(objective);
  if (progress_) progress_();
}

void GrpoLoop::finish_step(const char* bucket, int count, const TokenObjective& objective) {
  if (step_graphs_) step_graphs_->step(bucket, count, objective);
  else trainer_.optimizer_step();
  if (progress_) progress_();
}

GrpoLoop::~GrpoLoop() = default;

bool GrpoLoop::decode_graphs() const { return generator_->decode_graphs(); }

double GrpoLoop::sum_over_ranks(std::vector<double>& values) {
  Staging& s = *staging_;
  SHARDRL_CHECK(values.size() <= s.reduce.size(), "more values to reduce than the staging buffer holds");
  for (std::size_t i = 0; i < values.size(); ++i) s.reduce_h(i) = values[i];
  Kokkos::deep_copy(s.reduce.view(), s.reduce_h);
  comm_.all_reduce(s.reduce.data(), s.reduce.data(), values.size(), ReduceOp::sum, stream_of(model_.space()));
  comm_.synchronize(stream_of(model_.space()));
  Kokkos::deep_copy(s.reduce_h, s.reduce.view());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = s.reduce_h(i);
  return values.empty() ? 0.0 : values[0];
}

void GrpoLoop::set_micro_batch(const std::vector<Sequence>& seqs, int first, int end) {
  std::vector<std::int32_t> tokens, targets, row_tokens;
  fill_rows(seqs, first, end, micro_rows_, seq_len_, pad_id_, tokens, targets, row_tokens);
  model_.set_batch(tokens.data(), targets.data(), micro_rows_, seq_len_, nullptr, row_tokens.data());
}

void GrpoLoop::check_demonstrations() const {
  const auto check = [&](const TaskExample& ex, const std::string& which) {
    const std::size_t n = warmup_ids(ex, eos_id_).size(), prompt = prompt_ids(ex).size();
    if (static_cast<std::int64_t>(n) > seq_len_ + 1)
      throw InputError(fmt::format("{}{} has {} tokens with its demonstration (prompt {}, demonstration and EOS {}); "
                                   "the warm-up (rl.sft_steps) trains it in a row of train.seq_len + 1 = {} at most: "
                                   "raise train.seq_len{}",
                                   example_where(ex), which, n, prompt, n - prompt, seq_len_ + 1,
                                   task_->longest_demonstration().empty() ? ", or drop the line" : ""));
  };
  task_->for_each_dataset_example([&](const TaskExample& ex) { check(ex, "the example (every line is checked "
                                                                        "before the warm-up)"); });
  TaskExample longest;
  longest.prompt = task_->longest_prompt();
  longest.demonstration = task_->longest_demonstration();
  if (!longest.demonstration.empty())
    check(longest, fmt::format("the longest example of rl.task = \"{}\" at rl.difficulty = {}", task_->name(),
                               options_.task.difficulty));
}

TrainStats GrpoLoop::warmup_step(std::int64_t step) {
  const TraceSpan span("warm-up step", step);
  const auto t0 = std::chrono::steady_clock::now();
  arena_.enter(Phase::train);
  const std::int64_t B = options_.sft_batch_size;
  const auto seed = options_.seed + 1;   // warm-up examples apart from RL prompts
  const auto [begin, end] = prompts_of_rank(B, comm_.size(), comm_.rank());
  // Every rank builds the whole batch (cheap, host) to know the global token count without a
  // collective, and checks every length alike, so a too-long example stops every rank.
  std::vector<Sequence> mine;
  double tokens = 0, all_ids = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    TaskExample ex = task_->example(seed, step, i);
    check_ids_in_vocabulary(ex, model_.options().shape.vocab_size, "warm-up example", i, "step", step);
    Sequence s;
    s.prompt_len = static_cast<int>(prompt_ids(ex).size());
    s.ids = warmup_ids(ex, eos_id_);
    if (static_cast<int>(s.ids.size()) > seq_len_ + 1)
      throw InputError(fmt::format("{}warm-up example {} of step {} has {} tokens; train.seq_len = {} holds at most {}",
                                   example_where(ex), i, step, s.ids.size(), seq_len_, seq_len_ + 1));
    tokens += s.trained();
    all_ids += static_cast<double>(s.ids.size());
    if (i >= begin && i < end) mine.push_back(std::move(s));
  }
  Staging& st = *staging_;
  Kokkos::deep_copy(st.loss.view(), 0.0f);
  // The mean over the global batch's tokens is in the mask's weights, not in the objective's
  // scale: the objective stays the same from step to step (one captured graph for all).
  const auto weight = static_cast<float>(1.0 / tokens);
  const MaskedNll objective(st.mask.data(), 1.0f, st.loss.data());
  const int micro = ceil_div(ceil_div(B, comm_.size()), micro_rows_);
  // MoE layers: each micro-batch's load-balancing loss counts for its share of the step, among the
  // micro-batches of rows over all ranks (a rank's padding micro-batches add none).
  std::int64_t real_micro = 0;
  for (int r = 0; r < comm_.size(); ++r) {
    const auto [first, last] = prompts_of_rank(B, comm_.size(), r);
    real_micro += ceil_div(last - first, micro_rows_);
  }
  model_.set_aux_loss_weight(1.0f / static_cast<float>(std::max<std::int64_t>(real_micro, 1)));
  for (int m = 0; m < micro; ++m) {
    const int first = m * micro_rows_;
    set_micro_batch(mine, first, static_cast<int>(mine.size()));
    Kokkos::deep_copy(st.mask_h, 0.0f);
    for (int r = 0; r < micro_rows_ && first + r < static_cast<int>(mine.size()); ++r) {
      const Sequence& s = mine[first + r];
      for (int k = 0; k < s.trained(); ++k) st.mask_h(std::size_t(r) * seq_len_ + s.position_of(k)) = weight;
    }
    Kokkos::deep_copy(st.mask.view(), st.mask_h);
    micro_batch_ready(m, objective);
  }
  finish_step("warm-up", micro, objective);
  Kokkos::deep_copy(st.loss_h, st.loss.view());
  std::vector<double> loss{st.loss_h(0)};
  TrainStats out;
  out.loss = sum_over_ranks(loss);
  const StepMetrics sm = trainer_.metrics();
  out.grad_norm = sm.grad_norm;
  out.lr = sm.lr;
  out.skipped = sm.last_skipped ? 1 : 0;
  out.tokens = all_ids;
  out.seconds = seconds_since(t0);
  return out;
}

std::vector<std::vector<float>> GrpoLoop::advantages(const RolloutBatch& b,
                                                     const std::vector<std::vector<float>>& old_logp,
                                                     const std::vector<std::vector<float>>& ref_logp) {
  const std::size_t rows = b.sequences.size();
  const double kl_coef = options_.loss.kl_coef;
  // The KL of each token as a reward (rl.kl_in_reward): the estimator at the log-ratio of the
  // policy that sampled (the old log-probabilities) to the reference, as verl does.
  std::vector<std::vector<double>> kl(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    kl[r].assign(static_cast<std::size_t>(b.sequences[r].trained()), 0.0);
    if (!options_.kl_in_reward) continue;
    for (std::size_t t = 0; t < kl[r].size(); ++t) {
      float k = 0, dk = 0;
      kl_estimate(options_.loss.kl_estimator, old_logp[r][t] - ref_logp[r][t], k, dk);
      kl[r][t] = k;
    }
  }
  const double in_reward = options_.kl_in_reward ? kl_coef : 0.0;
  std::vector<std::vector<float>> out(rows);
  if (options_.advantage_estimator == AdvantageEstimator::reinforce_plus_plus) {
    // Returns per token, whitened over every trained token of the global batch.
    std::vector<std::vector<double>> returns(rows);
    TokenMoments m;
    for (std::size_t r = 0; r < rows; ++r) {
      returns[r] = token_returns(b.reward[r], kl[r], in_reward);
      if (b.trained[r])
        for (double g : returns[r]) m.add(g);
    }
    std::vector<double> moments{m.count, m.sum, m.sum_sq};
    sum_on_host(comm_.host_comm(), moments);
    m = TokenMoments{moments[0], moments[1], moments[2]};
    for (std::size_t r = 0; r < rows; ++r)
      for (double g : returns[r]) out[r].push_back(static_cast<float>(whiten(g, m)));
    return out;
  }
  std::vector<double> rewards(rows);
  for (std::size_t r = 0; r < rows; ++r) rewards[r] = reward_with_kl(b.reward[r], kl[r], in_reward);
  const std::vector<float> per_row =
      options_.advantage_estimator == AdvantageEstimator::rloo
          ? rloo_advantages(rewards, group_)
          : group_advantages(rewards, group_,
                             options_.advantage_estimator == AdvantageEstimator::grpo && options_.scale_by_std,
                             options_.adv_eps);
  for (std::size_t r = 0; r < rows; ++r) out[r].assign(kl[r].size(), per_row[r]);
  return out;
}

TrainStats GrpoLoop::train(const RolloutBatch& b) {
  const TraceSpan span("train");
  const auto t0 = std::chrono::steady_clock::now();
  arena_.enter(Phase::train);
  Staging& st = *staging_;
  const bool kl = options_.loss.kl_coef > 0;
  const bool recompute = options_.old_logp == OldLogp::recompute;
  const bool tis = options_.tis_cap > 0;
  const float temperature = sampling_temperature(options_.sampling);
  const std::size_t rows = b.sequences.size();
  const bool moe = model_.options().shape.n_experts > 0;

  // Each minibatch's sequences in rows (train.packing): packed into rows as long as its longest
  // sequence needs (with MoE layers one to a row that long), or one per row of train.seq_len.
  // Every rank runs as many micro-batches as the rank that needs the most (each is a round of
  // collectives); the others' extra ones are padding.
  std::vector<PackedRows> layout;
  std::vector<double> row_len(minibatches_, seq_len_), micro(minibatches_), real_micro(minibatches_);
  for (int k = 0; k < minibatches_; ++k)
    if (options_.short_rows)
      row_len[k] = row_length(b.sequences, b.minibatch_begin[k], b.minibatch_begin[k + 1], kRowGranule, seq_len_);
  // One row length on every rank, the one rank would use alone: with captured steps every rank's
  // step is then of the same bucket, and they capture and replay together (a rank capturing while
  // another ran its bucket's first, eager step would give NCCL registered buffers on one side of
  // a collective only); and the eager job takes the captured one's shapes.
  if (options_.short_rows) max_on_host(comm_.host_comm(), row_len);
  for (int k = 0; k < minibatches_; ++k) {
    const int first = b.minibatch_begin[k], end = b.minibatch_begin[k + 1];
    layout.push_back(pack_rows(b.sequences, first, end, static_cast<int>(row_len[k]), options_.packing));
    real_micro[k] = ceil_div(static_cast<std::int64_t>(layout[k].rows.size()), micro_rows_);
    micro[k] = std::max(1.0, real_micro[k]);
  }
  max_on_host(comm_.host_comm(), micro);
  // The micro-batches of rows over all ranks: each one's MoE load-balancing loss counts for its
  // share of the step; the padding micro-batches a rank runs to keep in step add none.
  if (moe) sum_on_host(comm_.host_comm(), real_micro);
  // Sets micro-batch m of minibatch k on the model; calls f(i, r) for each sequence i in it.
  std::vector<std::int32_t> tokens, targets, positions, row_tokens;
  auto set_micro = [&](int k, int m) {
    fill_packed_rows(b.sequences, layout[k], m * micro_rows_, micro_rows_, pad_id_, tokens, targets, positions,
                     row_tokens);
    model_.set_batch(tokens.data(), targets.data(), micro_rows_, layout[k].row_len, positions.data(),
                     row_tokens.data());
  };
  auto for_each_sequence = [&](int k, int m, auto&& f) {
    const auto& rows_k = layout[k].rows;
    for (int r = m * micro_rows_; r < std::min<int>((m + 1) * micro_rows_, static_cast<int>(rows_k.size())); ++r)
      for (int i : rows_k[r]) f(i);
  };
  auto slot = [&](int k, int m, int i, int t) {
    return layout[k].slot(b.sequences, b.minibatch_begin[k], i, t, m * micro_rows_);
  };

  // Log-probabilities of the policy that sampled (and of the reference) for every row, before
  // the first update changes the weights, at the temperature the rollout sampled with.
  std::vector<std::vector<float>> old_logp = b.logp, ref_logp(kl ? rows : 0);
  auto forward_into = [&](WeightSource source, std::vector<std::vector<float>>& dst) {
    for (int k = 0; k < minibatches_; ++k)
      for (int m = 0; m < static_cast<int>(micro[k]); ++m) {
        set_micro(k, m);
        trainer_.forward_logp(st.logp.data(), source, temperature);
        Kokkos::deep_copy(st.logp_h, st.logp.view());
        for_each_sequence(k, m, [&](int i) {
          std::vector<float>& d = dst[i];
          d.resize(b.sequences[i].trained());
          for (int t = 0; t < b.sequences[i].trained(); ++t) d[t] = st.logp_h(slot(k, m, i, t));
        });
      }
  };
  if (recompute) forward_into(WeightSource::policy, old_logp);
  if (kl) forward_into(WeightSource::reference, ref_logp);
  const std::vector<std::vector<float>> advantage = advantages(b, old_logp, ref_logp);

  // The sampler against the training forward: every token's ratio when the old log-probabilities
  // were recomputed (they are that forward's); else the first minibatch's, from the loss kernel.
  TrainStats out;
  std::vector<double> ratio{0.0, 0.0};   // sum, tokens
  double ratio_max = 0;
  if (recompute) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t t = 0; t < old_logp[r].size(); ++t) {
        const double x = std::exp(static_cast<double>(old_logp[r][t]) - b.logp[r][t]);
        ratio[0] += x;
        ratio[1] += 1;
        ratio_max = std::max(ratio_max, x);
      }
  }

  GrpoLossOptions loss = options_.loss;
  if (options_.kl_in_reward) loss.kl_coef = 0.0f;   // the KL is in the advantages; kl still reports it
  const GrpoInputs inputs{st.old_logp.data(), kl ? st.ref_logp.data() : nullptr, st.advantage.data(),
                          st.weight.data(), tis ? st.is_weight.data() : nullptr};
  GrpoObjective objective(inputs, loss, temperature, st.stats.data());
  model_.reset_aux_loss();   // after the forward-only passes above: training forwards only
  Kokkos::deep_copy(st.stats.view(), 0.0f);
  double trained_ids = 0;
  const double loss_tokens = options_.loss_tokens > 0 ? options_.loss_tokens : options_.max_new_tokens;
  for (int k = 0; k < minibatches_; ++k) {
    if (moe) model_.set_aux_loss_weight(1.0f / static_cast<float>(std::max(real_micro[k], 1.0)));
    for (int m = 0; m < static_cast<int>(micro[k]); ++m) {
      set_micro(k, m);
      Kokkos::deep_copy(st.weight_h, 0.0f);
      for_each_sequence(k, m, [&](int row) {
        const Sequence& s = b.sequences[row];
        trained_ids += static_cast<double>(s.ids.size());
        if (!b.trained[row]) return;   // weight 0: rl.overlong = "filter" dropped it
        double w = 0;
        switch (options_.loss_aggregation) {
          case LossAggregation::token: w = 1.0 / b.minibatch_tokens[k]; break;
          case LossAggregation::sequence: w = 1.0 / (b.minibatch_sequences[k] * s.trained()); break;
          case LossAggregation::constant: w = 1.0 / (b.minibatch_sequences[k] * loss_tokens); break;
        }
        for (int t = 0; t < s.trained(); ++t) {
          const std::size_t i = slot(k, m, row, t);
          st.weight_h(i) = static_cast<float>(w);
          st.adv_h(i) = advantage[row][t];
          st.old_h(i) = old_logp[row][t];
          if (kl) st.ref_h(i) = ref_logp[row][t];
          // Truncated importance sampling (Yao et al. 2025): the sampler drew from a policy the
          // training forward only approximates; weight by their ratio, capped.
          if (tis) st.is_h(i) = static_cast<float>(
              std::min<double>(options_.tis_cap, std::exp(double(old_logp[row][t]) - b.logp[row][t])));
        }
      });
      Kokkos::deep_copy(st.weight.view(), st.weight_h);
      Kokkos::deep_copy(st.advantage.view(), st.adv_h);
      Kokkos::deep_copy(st.old_logp.view(), st.old_h);
      if (kl) Kokkos::deep_copy(st.ref_logp.view(), st.ref_h);
      if (tis) Kokkos::deep_copy(st.is_weight.view(), st.is_h);
      micro_batch_ready(m, objective);
    }
    finish_step("grpo", static_cast<int>(micro[k]), objective);
    out.skipped += trainer_.metrics().last_skipped ? 1 : 0;
    if (k == 0 && !recompute) {   // before the second update: the first minibatch's ratios
      Kokkos::deep_copy(st.stats_h, st.stats.view());
      ratio = {st.stats_h(kGrpoRatioSum), st.stats_h(kGrpoTokens)};
      ratio_max = st.stats_h(kGrpoRatioMax);
    }
  }
  Kokkos::deep_copy(st.stats_h, st.stats.view());
  std::vector<double> sums{st.stats_h(kGrpoLoss), st.stats_h(kGrpoKl), st.stats_h(kGrpoClipped),
                           st.stats_h(kGrpoWeight), trained_ids, model_.aux_loss(), ratio[0], ratio[1]};
  sum_over_ranks(sums);
  const StepMetrics sm = trainer_.metrics();
  out.loss = sums[0] / minibatches_;
  // The KL's weighted mean per minibatch: the weights sum to 1 over a minibatch's tokens only for
  // token aggregation, so divide by them.
  out.kl = sums[3] > 0 ? sums[1] / sums[3] : 0.0;
  out.clip_frac = sums[3] > 0 ? sums[2] / sums[3] : 0.0;
  out.grad_norm = sm.grad_norm;
  out.lr = sm.lr;
  out.tokens = sums[4];
  out.aux_loss = sums[5] / minibatches_;
  out.rollout_train_ratio_mean = sums[7] > 0 ? sums[6] / sums[7] : 1.0;
  out.rollout_train_ratio_max = max_on_host(comm_.host_comm(), ratio_max);
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace shardrl
