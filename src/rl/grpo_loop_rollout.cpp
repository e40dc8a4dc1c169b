// The RL loop's rollout phase (draws, dynamic sampling, scoring) and evaluation; construction, the
// warm-up and the train phase are in grpo_loop.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "core/progress_meter.hpp"
#include "core/trace.hpp"
#include "mpi/host_exchange.hpp"
#include "rl/grpo_loop.hpp"
#include "rl/grpo_loop_internal.hpp"
#include "rl/overlong.hpp"
#include "rollout/batch_split.hpp"

namespace shardrl {

using namespace grpo_loop_detail;

namespace {
// What a prompt of n tokens with completions of max_new tokens needs: the train rows hold n +
// max_new tokens within train.seq_len + 1, the generator its n + max_new - 1 fed positions and
// the last draw within model.max_seq_len (so train.seq_len = max_seq_len gains no room over
// max_seq_len - 1). Named, so that a limit set by max_seq_len is not blamed on seq_len.
std::string length_needs(std::int64_t n, int max_new, std::int64_t seq_len, std::int64_t max_seq_len) {
  const std::int64_t need = n + max_new - 1;
  std::string s = fmt::format("it needs train.seq_len >= {} (now {})", need, seq_len);
  if (need + 1 > max_seq_len) s += fmt::format(" and model.max_seq_len >= {} (now {})", need + 1, max_seq_len);
  return s;
}
}  // namespace

std::vector<std::int32_t> GrpoLoop::checked_prompt(const TaskExample& ex, const std::string& which) const {
  std::vector<std::int32_t> ids = prompt_ids(ex);
  const int max_new = options_.max_new_tokens;
  if (static_cast<std::int64_t>(ids.size()) + max_new > gen_len_)
    throw InputError(fmt::format("{}{} has {} tokens; with rollout.max_new_tokens = {} {}", example_where(ex), which,
                                 ids.size(), max_new,
                                 length_needs(static_cast<std::int64_t>(ids.size()), max_new, seq_len_,
                                              model_.options().shape.max_seq_len)));
  return ids;
}

std::vector<SampledGroup> GrpoLoop::draw_round(std::int64_t iteration, int round, std::vector<double>& sums) {
  const std::uint64_t seed = options_.seed;
  const int max_new = options_.max_new_tokens;
  const std::int64_t first_index = std::int64_t(round) * options_.prompts_per_iteration;
  // This rank's prompts: its share of each minibatch. Every rank checks every prompt's length,
  // so a prompt too long for the buffers stops all ranks alike. With rollout.tensor_parallel the
  // ranks of a group generate all their prompts together; each keeps its own.
  std::vector<GenerationRow> rows;
  std::vector<char> own;               // per row: one of this rank's prompts
  std::vector<TaskExample> examples;   // per own row
  std::vector<SampledGroup> groups;
  const int T = tensor_parallel_ ? tensor_parallel_->size() : 1;
  const int first_of_group = comm_.rank() / T * T;
  for (int k = 0; k < minibatches_; ++k) {
    const auto [begin, end] = prompts_of_rank(prompts_per_minibatch_, comm_.size(), comm_.rank());
    const std::int64_t group_begin = prompts_of_rank(prompts_per_minibatch_, comm_.size(), first_of_group).first;
    const std::int64_t group_end = prompts_of_rank(prompts_per_minibatch_, comm_.size(), first_of_group + T - 1).second;
    for (int p = 0; p < prompts_per_minibatch_; ++p) {
      const std::int64_t index = first_index + std::int64_t(k) * prompts_per_minibatch_ + p;
      TaskExample ex = task_->example(seed, iteration, index);
      check_ids_in_vocabulary(ex, model_.options().shape.vocab_size, "prompt", index, "iteration", iteration);
      std::vector<std::int32_t> ids = checked_prompt(ex, fmt::format("prompt {} of iteration {}", index, iteration));
      if (p < group_begin || p >= group_end) continue;
      const bool mine = p >= begin && p < end;
      for (int g = 0; g < group_; ++g) {
        rows.push_back(GenerationRow{ids, index, g});
        own.push_back(mine ? 1 : 0);
        if (mine) examples.push_back(ex);
      }
      if (!mine) continue;
      SampledGroup group;
      group.prompt_index = index;
      group.prompt = std::move(ids);
      groups.push_back(std::move(group));
    }
  }
  std::vector<Completion> out;
  bool cut_short = false;
  // Expert-parallel decoding runs on every rank, with rows or not (rollout/generator.hpp).
  if (!rows.empty() || options_.engine.expert_parallel) {
    std::vector<Completion> drawn =
        generator_->generate(weights_->units(), rows, options_.sampling, max_new, seed, iteration, stop_ids_);
    cut_short = generator_->last_stats().abandoned;
    for (std::size_t r = 0; r < drawn.size(); ++r)
      if (own[r]) out.push_back(std::move(drawn[r]));
  }
  leave_if_abandoned(cut_short, "rollout");
  const std::vector<Scored> scores = agreed_score(examples, out);
  for (std::size_t r = 0; r < out.size(); ++r) {
    SampledGroup& group = groups[r / static_cast<std::size_t>(group_)];
    const double score = scores[r].reward;
    sums[0] += score;
    sums[1] += score * score;
    sums[2] += scores[r].pass ? 1.0 : 0.0;
    for (float h : out[r].entropy) sums[3] += h;
    sums[4] += static_cast<double>(out[r].tokens.size());
    const int length = static_cast<int>(out[r].tokens.size());
    const double penalty = options_.overlong == Overlong::soft
                               ? overlong_penalty(length, max_new, options_.overlong_buffer)
                               : 0.0;
    group.rewards.push_back(score + penalty);
    group.scores.push_back(score);
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
  const TraceSpan span("rollout");
  const auto t0 = std::chrono::steady_clock::now();
  arena_.enter(Phase::rollout);
  const std::int64_t P = options_.prompts_per_iteration;
  RolloutBatch b;
  b.iteration = iteration;
  {
    const TraceSpan gather("rollout weights");
    weights_->materialize(trainer_, generator_->model());
  }

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

std::vector<Scored> GrpoLoop::score(const std::vector<TaskExample>& examples, const std::vector<Completion>& out) const {
  if (task_->pre_tokenized()) {   // in one call: a reward process answers the whole batch
    std::vector<std::vector<std::int32_t>> completions;
    completions.reserve(out.size());
    for (const Completion& c : out) completions.push_back(c.tokens);
    return task_->score_ids_batch(examples, completions);
  }
  std::vector<Scored> rewards;
  for (std::size_t r = 0; r < out.size(); ++r)
    rewards.push_back(Scored::of(task_->score(examples[r], completion_text(out[r].tokens, stop_ids_))));
  return rewards;
}

void GrpoLoop::abandon_rollouts_when(std::function<bool()> check) {
  abandon_ = std::move(check);
  task_->give_up_scoring_when(abandon_);
  if (!abandon_ || !tensor_parallel_) return generator_->abandon_when(abandon_);
  // The group's ranks take the same decode steps (the same rows and draws), so each step's
  // agreement is met on all of them; a host all-reduce of one flag, beside milliseconds of step.
  generator_->abandon_when([group = tensor_parallel_->host_comm(), check = abandon_] { return any_rank(group, check()); });
}

void GrpoLoop::leave_if_abandoned(bool cut_short, const char* what) const {
  if (abandon_ && any_rank(comm_.host_comm(), cut_short || abandon_()))
    throw RolloutAbandoned(fmt::format("{} given up: a stop was requested that leaves no time to finish it", what));
}

std::vector<Scored> GrpoLoop::agreed_score(const std::vector<TaskExample>& examples,
                                           const std::vector<Completion>& out) const {
  std::vector<Scored> rewards;
  // This rank's reward process or data.
  run_on_every_rank(comm_.host_comm(), [&] { rewards = score(examples, out); });
  return rewards;
}

EvalStats GrpoLoop::evaluate() {
  const TraceSpan span("evaluation");
  const auto t0 = std::chrono::steady_clock::now();
  EvalStats e;
  e.prompts = task_->eval_count();
  e.k = options_.eval_samples;
  if (e.prompts == 0) return e;
  arena_.enter(Phase::rollout);
  weights_->materialize(trainer_, generator_->model());
  // The eval draw depends on the seed and the eval prompt alone (a fixed iteration tag), so every
  // evaluation of a run, at any world size, samples with the same random numbers.
  constexpr std::int64_t kEvalIteration = -1;
  // With rollout.tensor_parallel each group of ranks evaluates a share of the prompts together;
  // its first rank counts them.
  const int T = tensor_parallel_ ? tensor_parallel_->size() : 1;
  const bool counts = comm_.rank() % T == 0;
  const auto [begin, end] = prompts_of_rank(e.prompts, comm_.size() / T, comm_.rank() / T);
  const int max_new = options_.max_new_tokens;
  // (Every eval prompt's ids and length were checked on every rank when the job started.)
  std::vector<double> sums(4, 0.0);   // greedy reward, greedy passes, prompts passed by any of k, sampled reward
  // A rollout's rows on a rank: the largest batch a reward command scores in the rollout.
  const std::int64_t score_batch =
      std::int64_t(minibatches_) * prompts_of_rank(prompts_per_minibatch_, comm_.size(), 0).second * group_;
  // Greedy (pass@1) and k samples per prompt, in chunks that fit the generator's rows.
  for (const bool greedy : {true, false}) {
    const int per_prompt = greedy ? 1 : e.k;
    SamplingOptions sampling = options_.sampling;
    if (greedy) sampling.temperature = 0.0f;
    // Every rank makes as many rounds as the rank with the most prompts (the first:
    // prompts_of_rank gives the earlier ranks the remainder): each round's scoring agrees on
    // errors over all ranks, and expert-parallel decoding runs the ranks' generate calls together.
    // The paged engine takes every row at once and refills its slots; the static one runs
    // batches of its rows, a prompt's samples split over two batches where they must be (more
    // samples than rows: the call failed on an internal check) - each draw is keyed by its
    // prompt and sample, not by its batch.
    const std::int64_t most_rows = prompts_of_rank(e.prompts, comm_.size() / T, 0).second * per_prompt;
    const std::int64_t chunk = generator_->engine().engine == RolloutEngine::paged
                                   ? std::max<std::int64_t>(1, most_rows)
                                   : generator_->max_rows();
    const std::int64_t calls = (most_rows + chunk - 1) / chunk;
    const std::int64_t my_rows = (end - begin) * per_prompt;
    std::vector<Scored> rewards(static_cast<std::size_t>(my_rows));   // (prompt, sample) in order
    ProgressMeter meter(greedy ? "evaluation (greedy)" : "evaluation (samples)", calls);
    for (std::int64_t call = 0, first = 0; call < calls; ++call, first += chunk, meter.advance()) {
      std::vector<GenerationRow> rows;
      std::vector<TaskExample> examples;
      for (std::int64_t r = first; r < std::min(my_rows, first + chunk); ++r) {
        const std::int64_t i = begin + r / per_prompt;
        TaskExample ex = task_->eval_example(i);
        rows.push_back(GenerationRow{prompt_ids(ex), i, r % per_prompt});
        examples.push_back(std::move(ex));
      }
      const bool generates = !rows.empty() || options_.engine.expert_parallel;
      const std::vector<Completion> out =
          generates ? generator_->generate(weights_->units(), rows, sampling, max_new, options_.seed, kEvalIteration,
                                           stop_ids_)
                    : std::vector<Completion>{};
      leave_if_abandoned(generates && generator_->last_stats().abandoned, "evaluation");
      // Scored in batches no larger than a rollout's on a rank, as many on every rank as on the
      // first (it has the most rows): rl.reward_timeout_s bounds one batch, set for the
      // rollout's (a rank's whole share of the evaluation was one batch, and timed out).
      const std::int64_t most_in_call = std::min(chunk, most_rows - first);
      for (std::int64_t lo = 0; lo < most_in_call; lo += score_batch) {
        const auto mine = static_cast<std::int64_t>(examples.size());
        const auto from = static_cast<std::ptrdiff_t>(std::min(lo, mine));
        const auto to = static_cast<std::ptrdiff_t>(std::min(lo + score_batch, mine));
        const std::vector<Scored> scored =
            agreed_score(std::vector<TaskExample>(examples.begin() + from, examples.begin() + to),
                         std::vector<Completion>(out.begin() + from, out.begin() + to));
        std::copy(scored.begin(), scored.end(), rewards.begin() + first + from);   // (none past a rank's rows)
      }
    }
    for (std::int64_t p = 0; p < my_rows; p += per_prompt) {
      bool any = false;
      for (int g = 0; g < per_prompt; ++g) {
        const Scored& r = rewards[static_cast<std::size_t>(p + g)];
        any |= r.pass;
        if (greedy) {
          sums[0] += r.reward;
          sums[1] += r.pass ? 1.0 : 0.0;
        } else {
          sums[3] += r.reward;
        }
      }
      if (!greedy && any) sums[2] += 1.0;
    }
  }
  if (!counts) std::fill(sums.begin(), sums.end(), 0.0);
  sum_over_ranks(sums);
  const double n = static_cast<double>(e.prompts);
  e.reward_mean = sums[0] / n;
  e.pass_at_1 = sums[1] / n;
  e.pass_at_k = sums[2] / n;
  e.mean_at_k = sums[3] / (n * e.k);
  e.seconds = seconds_since(t0);
  return e;
}

}  // namespace shardrl
