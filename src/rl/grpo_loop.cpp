#include "rl/grpo_loop.hpp"

#include "mpi/host_exchange.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "rl/advantage.hpp"
#include "rl/grpo_objective.hpp"
#include "rl/overlong.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/batch_split.hpp"

namespace shardrl {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int ceil_div(std::int64_t a, std::int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Packed rows are as long as the minibatch's longest sequence, rounded up to this: few distinct
// batch shapes (each a captured step of its own with train.cuda_graph = "full").
constexpr int kRowGranule = 32;

// The ids the model sees for an example's prompt: a pre-tokenized prompt verbatim, else BOS and
// the prompt's bytes.
std::vector<std::int32_t> prompt_ids(const TaskExample& ex) {
  if (ex.pre_tokenized()) return ex.prompt_ids;
  std::vector<std::int32_t> ids{tokenizer::kBos};
  for (std::int32_t t : tokenizer::encode(ex.prompt)) ids.push_back(t);
  return ids;
}

// Every id of a pre-tokenized example must index the model's embedding and head (a text
// example's ids are the byte tokenizer's). Called for every example of a batch on every rank,
// so a bad line stops all ranks alike. `what`/`index` and `of`/`step` name the example in the
// message, e.g. "prompt 3 of iteration 7".
void check_ids_in_vocabulary(const TaskExample& ex, std::int64_t vocab_size, const char* what, std::int64_t index,
                             const char* of, std::int64_t step) {
  if (!ex.pre_tokenized()) return;
  const std::pair<const char*, const std::vector<std::int32_t>*> fields[] = {{"prompt_ids", &ex.prompt_ids},
                                                                            {"answer_ids", &ex.answer_ids}};
  for (const auto& [field, ids] : fields)
    for (std::size_t k = 0; k < ids->size(); ++k)
      if ((*ids)[k] >= vocab_size)
        throw InputError(fmt::format("{}: field \"{}\" element {} is id {}, outside the model's vocabulary "
                                     "(model.vocab_size = {}; {} {} of {} {})",
                                     ex.source.empty() ? "dataset" : ex.source, field, k, (*ids)[k], vocab_size, what,
                                     index, of, step));
}

// The completion's text as the task scores it: the bytes before the first EOS.
std::string completion_text(const std::vector<std::int32_t>& tokens, std::int32_t eos) {
  const auto end = std::find(tokens.begin(), tokens.end(), eos);
  return tokenizer::decode_completion(std::vector<std::int32_t>(tokens.begin(), end));
}

}  // namespace

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

GrpoLoop::GrpoLoop(const GrpoLoopOptions& options, Transformer& model, ShardedTrainer& trainer, Communicator& comm,
                   PhaseArena& arena)
    : options_(options), model_(model), trainer_(trainer), comm_(comm), arena_(arena),
      task_(make_task(options.task)), prompts_per_minibatch_(options.prompts_per_iteration / options.minibatches),
      group_(options.samples_per_prompt), minibatches_(options.minibatches),
      micro_rows_(model.options().max_batch), seq_len_(model.options().max_seq_len),
      gen_len_(std::min(seq_len_ + 1, model.options().shape.max_seq_len)),
      eos_id_(options.eos_id >= 0 ? options.eos_id : task_->eos_id()),
      pad_id_(task_->pre_tokenized() ? eos_id_ : tokenizer::kPad) {
  const int rows = minibatches_ * ceil_div(prompts_per_minibatch_, comm.size()) * group_;
  weights_ = std::make_unique<WeightSet>(trainer.layout(), model.compute_type_size(),
                                         ArenaPlacement{&arena, Phase::rollout});
  generator_ = std::make_unique<Generator>(model.options(), rows, gen_len_, model.space(), &arena);
  if (options.decode_graphs) generator_->use_decode_graphs();
  // The sums reduced over the ranks: the rollout's 5 statistics and each minibatch's token and
  // completion counts, the train phase's 8 statistics, the warm-up's loss.
  const std::size_t reduced = std::max<std::size_t>(8, 5 + 2 * static_cast<std::size_t>(minibatches_));
  staging_ = std::make_unique<Staging>(std::size_t(micro_rows_) * seq_len_, reduced);
  if (options.train_graph) {
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
}

void GrpoLoop::finish_step(const char* bucket, int count, const TokenObjective& objective) {
  if (step_graphs_) step_graphs_->step(bucket, count, objective);
  else trainer_.optimizer_step();
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
  std::vector<std::int32_t> tokens, targets;
  fill_rows(seqs, first, end, micro_rows_, seq_len_, pad_id_, tokens, targets);
  model_.set_batch(tokens.data(), targets.data(), micro_rows_, seq_len_);
}

TrainStats GrpoLoop::warmup_step(std::int64_t step) {
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
    s.ids = prompt_ids(ex);
    s.prompt_len = static_cast<int>(s.ids.size());
    if (ex.pre_tokenized()) s.ids.insert(s.ids.end(), ex.answer_ids.begin(), ex.answer_ids.end());
    else for (std::int32_t t : tokenizer::encode(ex.demonstration)) s.ids.push_back(t);
    s.ids.push_back(eos_id_);
    if (static_cast<int>(s.ids.size()) > seq_len_ + 1)
      throw InputError(fmt::format("warm-up example {} of step {} has {} tokens; train.seq_len = {} holds at most {}",
                                   i, step, s.ids.size(), seq_len_, seq_len_ + 1));
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
  // MoE layers: each micro-batch's load-balancing loss counts for its share of the step.
  model_.set_aux_loss_weight(1.0f / static_cast<float>(micro * comm_.size()));
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

std::vector<SampledGroup> GrpoLoop::draw_round(std::int64_t iteration, int round, std::vector<double>& sums) {
  const std::uint64_t seed = options_.seed;
  const int max_new = options_.max_new_tokens;
  const std::int64_t first_index = std::int64_t(round) * options_.prompts_per_iteration;
  // This rank's prompts: its share of each minibatch. Every rank checks every prompt's length,
  // so a prompt too long for the buffers stops all ranks alike.
  std::vector<GenerationRow> rows;
  std::vector<TaskExample> examples;   // per row
  std::vector<SampledGroup> groups;
  for (int k = 0; k < minibatches_; ++k) {
    const auto [begin, end] = prompts_of_rank(prompts_per_minibatch_, comm_.size(), comm_.rank());
    for (int p = 0; p < prompts_per_minibatch_; ++p) {
      const std::int64_t index = first_index + std::int64_t(k) * prompts_per_minibatch_ + p;
      TaskExample ex = task_->example(seed, iteration, index);
      check_ids_in_vocabulary(ex, model_.options().shape.vocab_size, "prompt", index, "iteration", iteration);
      std::vector<std::int32_t> ids = prompt_ids(ex);
      if (static_cast<std::int64_t>(ids.size()) + max_new > gen_len_)
        throw InputError(fmt::format(
            "prompt {} of iteration {} has {} tokens; with rollout.max_new_tokens = {} it needs train.seq_len >= {} "
            "(now {})",
            index, iteration, ids.size(), max_new, ids.size() + max_new - 1, seq_len_));
      if (p < begin || p >= end) continue;
      for (int g = 0; g < group_; ++g) {
        rows.push_back(GenerationRow{ids, index, g});
        examples.push_back(ex);
      }
      SampledGroup group;
      group.prompt_index = index;
      group.prompt = std::move(ids);
      groups.push_back(std::move(group));
    }
  }
  std::vector<Completion> out;
  if (!rows.empty())
    out = generator_->generate(weights_->units(), rows, options_.sampling, max_new, seed, iteration, eos_id_);
  const std::vector<double> scores = agreed_score(examples, out);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    SampledGroup& group = groups[r / static_cast<std::size_t>(group_)];
    const double score = scores[r];
    sums[0] += score;
    sums[1] += score * score;
    sums[2] += score == 1.0 ? 1.0 : 0.0;
    for (float h : out[r].entropy) sums[3] += h;
    sums[4] += static_cast<double>(out[r].tokens.size());
    const int length = static_cast<int>(out[r].tokens.size());
    const double penalty = options_.overlong == Overlong::soft
                               ? overlong_penalty(length, max_new, options_.overlong_buffer)
                               : 0.0;
    group.rewards.push_back(score + penalty);
    group.completions.push_back(std::move(out[r]));
  }
  return groups;
}

std::vector<SampledGroup> GrpoLoop::gather_batch(std::vector<SampledGroup>& drawn,
                                                 const std::vector<std::int64_t>& chosen) {
  const int ranks = comm_.size();
  const std::int64_t per_minibatch = prompts_per_minibatch_;
  std::vector<std::vector<std::pair<std::int64_t, SampledGroup>>> outgoing(ranks);
  std::size_t next = 0;   // drawn is in draw order, as chosen is
  for (std::int64_t slot = 0; slot < static_cast<std::int64_t>(chosen.size()); ++slot) {
    while (next < drawn.size() && drawn[next].prompt_index < chosen[slot]) ++next;
    if (next == drawn.size() || drawn[next].prompt_index != chosen[slot]) continue;   // another rank's
    const int dest = rank_of_prompt(slot % per_minibatch, per_minibatch, ranks);
    outgoing[dest].emplace_back(slot, std::move(drawn[next]));
  }
  std::vector<std::string> messages;
  for (const auto& groups : outgoing) messages.push_back(serialize_groups(groups));
  std::vector<std::pair<std::int64_t, SampledGroup>> mine;
  for (const std::string& bytes : exchange_bytes(comm_.host_comm(), messages))
    for (auto& p : deserialize_groups(bytes)) mine.push_back(std::move(p));
  std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<SampledGroup> batch;
  for (auto& p : mine) batch.push_back(std::move(p.second));
  return batch;
}

RolloutBatch GrpoLoop::rollout(std::int64_t iteration) {
  const auto t0 = std::chrono::steady_clock::now();
  arena_.enter(Phase::rollout);
  const std::int64_t P = options_.prompts_per_iteration;
  RolloutBatch b;
  b.iteration = iteration;
  weights_->materialize(trainer_);

  // Without dynamic sampling one round is the batch, already where it trains. With it, rounds
  // go on until P informative groups are drawn (or the rounds run out); every rank learns every
  // group's flag, so all choose the same groups, which then move to the ranks that train them.
  std::vector<double> sums(5, 0.0);   // reward, reward^2, passes, entropy, tokens
  std::vector<SampledGroup> drawn, batch;
  std::vector<char> informative;      // every drawn group's, in draw order
  std::int64_t found = 0;
  int rounds = 0;
  const int max_rounds = options_.dynamic_sampling ? options_.max_sampling_rounds : 1;
  while (rounds < max_rounds) {
    std::vector<SampledGroup> round = draw_round(iteration, rounds, sums);
    if (!options_.dynamic_sampling) {
      batch = std::move(round);
      ++rounds;
      break;
    }
    std::vector<double> flags(static_cast<std::size_t>(P), 0.0);
    for (const SampledGroup& g : round)
      flags[static_cast<std::size_t>(g.prompt_index - std::int64_t(rounds) * P)] = g.informative() ? 1.0 : 0.0;
    sum_on_host(comm_.host_comm(), flags);
    for (double f : flags) {
      informative.push_back(f > 0 ? 1 : 0);
      found += f > 0 ? 1 : 0;
    }
    for (SampledGroup& g : round) drawn.push_back(std::move(g));
    ++rounds;
    if (found >= P) break;
  }
  if (options_.dynamic_sampling) {
    const std::vector<std::int64_t> chosen = select_groups(informative, P);
    batch = gather_batch(drawn, chosen);
    // Uninformative groups drawn and not trained: every one, less those filling a short batch.
    b.groups_dropped = static_cast<std::int64_t>(informative.size()) - found - (P - std::min<std::int64_t>(found, P));
  }
  b.sampling_rounds = rounds;

  // Rows of the batch, minibatch by minibatch: this rank's share of each is consecutive.
  std::vector<double> trained(2 * minibatches_, 0.0);   // tokens, then completions, per minibatch
  const auto [begin, end] = prompts_of_rank(prompts_per_minibatch_, comm_.size(), comm_.rank());
  const std::size_t per_rank = static_cast<std::size_t>(end - begin);
  SHARDRL_CHECK(batch.size() == per_rank * static_cast<std::size_t>(minibatches_),
                fmt::format("{} groups for a rank that trains {} per minibatch", batch.size(), per_rank));
  for (int k = 0; k < minibatches_; ++k) {
    b.minibatch_begin.push_back(static_cast<int>(b.sequences.size()));
    for (std::size_t i = 0; i < per_rank; ++i) {
      SampledGroup& g = batch[std::size_t(k) * per_rank + i];
      for (int s = 0; s < group_; ++s) {
        Completion& c = g.completions[s];
        Sequence seq;
        seq.ids = g.prompt;
        seq.prompt_len = static_cast<int>(seq.ids.size());
        seq.ids.insert(seq.ids.end(), c.tokens.begin(), c.tokens.end());
        const bool keep = !(options_.overlong == Overlong::filter && !c.finished);
        if (keep) {
          trained[k] += seq.trained();
          trained[minibatches_ + k] += 1.0;
        }
        b.sequences.push_back(std::move(seq));
        b.logp.push_back(std::move(c.logp));
        b.reward.push_back(g.rewards[s]);
        b.trained.push_back(keep ? 1 : 0);
      }
    }
  }
  b.minibatch_begin.push_back(static_cast<int>(b.sequences.size()));
  for (double v : trained) sums.push_back(v);
  sum_over_ranks(sums);
  const double n = static_cast<double>(rounds) * static_cast<double>(P) * group_;
  b.tokens = sums[4];
  for (int k = 0; k < minibatches_; ++k) {
    b.minibatch_tokens.push_back(sums[5 + k]);
    b.minibatch_sequences.push_back(sums[5 + minibatches_ + k]);
  }
  b.reward_mean = sums[0] / n;
  b.reward_std = std::sqrt(std::max(0.0, sums[1] / n - b.reward_mean * b.reward_mean));
  b.pass_rate = sums[2] / n;
  b.response_len_mean = b.tokens / n;
  b.entropy = b.tokens > 0 ? sums[3] / b.tokens : 0.0;
  b.seconds = seconds_since(t0);
  return b;
}

std::vector<double> GrpoLoop::score(const std::vector<TaskExample>& examples, const std::vector<Completion>& out) const {
  if (task_->pre_tokenized()) {   // in one call: a reward process answers the whole batch
    std::vector<std::vector<std::int32_t>> completions;
    completions.reserve(out.size());
    for (const Completion& c : out) completions.push_back(c.tokens);
    return task_->score_ids_batch(examples, completions);
  }
  std::vector<double> rewards;
  for (std::size_t r = 0; r < out.size(); ++r)
    rewards.push_back(task_->score(examples[r], completion_text(out[r].tokens, eos_id_)));
  return rewards;
}

std::vector<double> GrpoLoop::agreed_score(const std::vector<TaskExample>& examples,
                                           const std::vector<Completion>& out) const {
  std::vector<double> rewards;
  std::string problem;
  try {
    rewards = score(examples, out);
  } catch (const InputError& e) {   // this rank's reward process or data
    problem = e.what();
  }
  agree_on_error(comm_.host_comm(), problem);
  return rewards;
}

EvalStats GrpoLoop::evaluate() {
  const auto t0 = std::chrono::steady_clock::now();
  EvalStats e;
  e.prompts = task_->eval_count();
  e.k = options_.eval_samples;
  if (e.prompts == 0) return e;
  arena_.enter(Phase::rollout);
  weights_->materialize(trainer_);
  // The eval draw depends on the seed and the eval prompt alone (a fixed iteration tag), so every
  // evaluation of a run, at any world size, samples with the same random numbers.
  constexpr std::int64_t kEvalIteration = -1;
  const auto [begin, end] = prompts_of_rank(e.prompts, comm_.size(), comm_.rank());
  const int max_new = options_.max_new_tokens;
  std::vector<double> sums(4, 0.0);   // greedy reward, greedy passes, prompts passed by any of k, sampled reward
  // Greedy (pass@1) and k samples per prompt, in chunks that fit the generator's rows.
  for (const bool greedy : {true, false}) {
    const int per_prompt = greedy ? 1 : e.k;
    SamplingOptions sampling = options_.sampling;
    if (greedy) sampling.temperature = 0.0f;
    const std::int64_t chunk = std::max<std::int64_t>(1, generator_->max_rows() / per_prompt);
    for (std::int64_t first = begin; first < end; first += chunk) {
      std::vector<GenerationRow> rows;
      std::vector<TaskExample> examples;
      for (std::int64_t i = first; i < std::min<std::int64_t>(end, first + chunk); ++i) {
        TaskExample ex = task_->eval_example(i);
        std::vector<std::int32_t> ids = prompt_ids(ex);
        if (static_cast<std::int64_t>(ids.size()) + max_new > gen_len_)
          throw InputError(fmt::format("eval prompt {} ({}) has {} tokens; with rollout.max_new_tokens = {} it needs "
                                       "train.seq_len >= {}",
                                       i, ex.source, ids.size(), max_new, ids.size() + max_new - 1));
        for (int g = 0; g < per_prompt; ++g) {
          rows.push_back(GenerationRow{ids, i, g});
          examples.push_back(ex);
        }
      }
      const std::vector<Completion> out =
          generator_->generate(weights_->units(), rows, sampling, max_new, options_.seed, kEvalIteration, eos_id_);
      const std::vector<double> rewards = agreed_score(examples, out);
      for (std::size_t p = 0; p < rows.size(); p += static_cast<std::size_t>(per_prompt)) {
        bool any = false;
        for (int g = 0; g < per_prompt; ++g) {
          const double r = rewards[p + static_cast<std::size_t>(g)];
          any |= r == 1.0;
          if (greedy) {
            sums[0] += r;
            sums[1] += r == 1.0 ? 1.0 : 0.0;
          } else {
            sums[3] += r;
          }
        }
        if (!greedy && any) sums[2] += 1.0;
      }
    }
  }
  sum_over_ranks(sums);
  const double n = static_cast<double>(e.prompts);
  e.reward_mean = sums[0] / n;
  e.pass_at_1 = sums[1] / n;
  e.pass_at_k = sums[2] / n;
  e.mean_at_k = sums[3] / (n * e.k);
  e.seconds = seconds_since(t0);
  return e;
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
  const auto t0 = std::chrono::steady_clock::now();
  arena_.enter(Phase::train);
  Staging& st = *staging_;
  const bool kl = options_.loss.kl_coef > 0;
  const bool recompute = options_.old_logp == OldLogp::recompute;
  const bool tis = options_.tis_cap > 0;
  const float temperature = sampling_temperature(options_.sampling);
  const std::size_t rows = b.sequences.size();

  // Each minibatch's sequences in rows: packed (train.packing) into rows as long as its longest
  // sequence needs, or one per row of train.seq_len. Every rank runs as many micro-batches as the
  // rank that needs the most (each is a round of collectives); the others' extra ones are padding.
  std::vector<PackedRows> layout;
  std::vector<double> micro(minibatches_);
  for (int k = 0; k < minibatches_; ++k) {
    const int first = b.minibatch_begin[k], end = b.minibatch_begin[k + 1];
    const int row_len = options_.packing ? row_length(b.sequences, first, end, kRowGranule, seq_len_) : seq_len_;
    layout.push_back(pack_rows(b.sequences, first, end, row_len, options_.packing));
    micro[k] = std::max(1, ceil_div(static_cast<std::int64_t>(layout[k].rows.size()), micro_rows_));
  }
  max_on_host(comm_.host_comm(), micro);
  // Sets micro-batch m of minibatch k on the model; calls f(i, r) for each sequence i in it.
  std::vector<std::int32_t> tokens, targets, positions;
  auto set_micro = [&](int k, int m) {
    fill_packed_rows(b.sequences, layout[k], m * micro_rows_, micro_rows_, pad_id_, tokens, targets, positions);
    model_.set_batch(tokens.data(), targets.data(), micro_rows_, layout[k].row_len, positions.data());
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
    // MoE layers: each micro-batch's load-balancing loss counts for its share of the step.
    model_.set_aux_loss_weight(1.0f / static_cast<float>(micro[k] * comm_.size()));
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
