// Rollout across ranks: weights gathered from the shards into a full set, prompts split by
// rank, samples generated; the union over ranks equals what one rank generates for the whole
// batch from an unsharded model with the same seed (np 1, 2 and 4), with the static engine and
// with the paged one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "config/model_presets.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "model/dense_parameters.hpp"
#include "mpi/host_exchange.hpp"
#include "rollout/batch_split.hpp"
#include "rollout/generator.hpp"
#include "rollout/weight_set.hpp"

namespace shardrl {
namespace {

constexpr int kPrompts = 6, kSamples = 2, kNew = 8;

ModelOptions opts(int rows, int len) {
  ModelOptions o;
  o.shape = resolve_model_shape(ModelConfig{});
  o.precision = Precision::fp32;
  o.max_batch = rows;
  o.max_seq_len = len;
  return o;
}

std::vector<GenerationRow> rows_for(std::int64_t begin, std::int64_t end) {
  std::vector<GenerationRow> rows;
  for (std::int64_t p = begin; p < end; ++p)
    for (int g = 0; g < kSamples; ++g) {
      GenerationRow r;
      for (int t = 0; t <= p % 4; ++t) r.prompt.push_back(static_cast<std::int32_t>(97 + (p * 7 + t * 3) % 26));
      r.prompt_index = p;
      r.sample_index = g;
      rows.push_back(r);
    }
  return rows;
}

std::string render(const std::vector<GenerationRow>& rows, const std::vector<Completion>& out) {
  std::ostringstream s;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    s << rows[i].prompt_index << "/" << rows[i].sample_index << ":";
    for (auto t : out[i].tokens) s << " " << t;
    s << "\n";
  }
  return s.str();
}

TEST(Rollout, SameSamplesAtAnyWorldSize) {
  static std::unique_ptr<Communicator> comm = make_communicator(
      has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD, 120.0);
  Transformer train_model(opts(1, 8), ExecSpace());
  ShardedTrainer trainer(train_model, *comm, FsdpOptions{}, OptimizerOptions{});
  trainer.initialize(5, 0.3f);
  WeightSet weights(trainer.layout(), sizeof(float));
  weights.materialize(trainer, train_model);   // no adapters: nothing folds into the decoder

  auto [begin, end] = prompts_of_rank(kPrompts, comm->size(), comm->rank());
  std::vector<GenerationRow> mine = rows_for(begin, end);
  std::string text, paged_text;
  if (!mine.empty()) {
    Generator gen(opts(1, 1), static_cast<int>(mine.size()), 16, ExecSpace());
    text = render(mine, gen.generate(weights.units(), mine, SamplingOptions{}, kNew, 11, 2, 258));
    // rollout.engine = "paged" with 3 decode slots: prompts prefilled once for their samples,
    // rows joining as others finish, blocks of 4 positions.
    EngineOptions paged;
    paged.engine = RolloutEngine::paged;
    paged.block_positions = 4;
    Generator paged_gen(opts(1, 1), 3, 16, ExecSpace(), nullptr, paged);
    paged_text = render(mine, paged_gen.generate(weights.units(), mine, SamplingOptions{}, kNew, 11, 2, 258));
  }
  std::vector<std::string> parts = gather_strings(MPI_COMM_WORLD, text, 0);
  std::vector<std::string> paged_parts = gather_strings(MPI_COMM_WORLD, paged_text, 0);
  if (comm->rank() != 0) return;
  std::string all, paged_all;
  for (const auto& p : parts) all += p;
  for (const auto& p : paged_parts) paged_all += p;

  // One rank, the whole batch, an unsharded model from the same seed.
  Transformer ref_model(opts(1, 8), ExecSpace());
  DenseParameters ref(ref_model, ExecSpace());
  ref.initialize(5, 0.3f);
  std::vector<const void*> ref_weights;
  for (int u = 0; u < ref_model.unit_count(); ++u) ref_weights.push_back(ref.compute_weights(u));
  std::vector<GenerationRow> everything = rows_for(0, kPrompts);
  Generator gen(opts(1, 1), static_cast<int>(everything.size()), 16, ExecSpace());
  std::string want = render(everything, gen.generate(ref_weights, everything, SamplingOptions{}, kNew, 11, 2, 258));
  EXPECT_EQ(all, want);
  EXPECT_EQ(paged_all, want) << "the paged engine";
}

// An RL-shaped job on this rank: a sharded trainer, the rollout's weight set and a generator,
// with the transient buffers of both phases in one PhaseArena or each in its own allocation.
struct AlternatingJob {
  std::unique_ptr<PhaseArena> arena;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<ShardedTrainer> trainer;
  std::unique_ptr<WeightSet> weights;
  std::unique_ptr<Generator> gen;
  std::int64_t ledger_delta = 0, persistent_delta = 0;
  static constexpr int kRows = kPrompts * kSamples, kLen = 16;

  AlternatingJob(Communicator& comm, bool shared) {
    const MemoryLedger& ledger = MemoryLedger::instance();
    const std::int64_t before = ledger.total(), persistent_before = ledger.persistent();
    if (shared) arena = std::make_unique<PhaseArena>(ExecSpace(), /*poison_on_enter=*/true);
    ModelOptions train = opts(kRows, kLen);
    train.arena = ArenaPlacement{arena.get(), Phase::train};
    model = std::make_unique<Transformer>(train, ExecSpace());
    trainer = std::make_unique<ShardedTrainer>(*model, comm, FsdpOptions{}, OptimizerOptions{});
    weights = std::make_unique<WeightSet>(trainer->layout(), sizeof(float), ArenaPlacement{arena.get(), Phase::rollout});
    gen = std::make_unique<Generator>(opts(1, 1), kRows, kLen, ExecSpace(), arena.get());
    if (arena) arena->commit();
    trainer->initialize(5, 0.3f);
    ledger_delta = ledger.total() - before;
    persistent_delta = ledger.persistent() - persistent_before;
  }

  // Rollout (every rank generates every row: the point here is memory, not the split), then
  // one training step on the prompts and completions; returns the completions and the loss.
  std::pair<std::string, float> round(int iteration) {
    if (arena) arena->enter(Phase::rollout);
    weights->materialize(*trainer, gen->model());
    std::vector<GenerationRow> rows = rows_for(0, kPrompts);
    SamplingOptions sampling;
    sampling.temperature = 1.0f;
    std::vector<Completion> out = gen->generate(weights->units(), rows, sampling, kNew, 11, iteration, 258);
    if (arena) arena->enter(Phase::train);
    std::vector<std::int32_t> tokens, targets;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      std::vector<std::int32_t> seq = rows[r].prompt;
      seq.insert(seq.end(), out[r].tokens.begin(), out[r].tokens.end());
      seq.resize(kLen + 1, 258);
      tokens.insert(tokens.end(), seq.begin(), seq.end() - 1);
      targets.insert(targets.end(), seq.begin() + 1, seq.end());
    }
    model->set_batch(tokens.data(), targets.data(), kRows, kLen);
    DeviceView<float> mask("mask", kRows * kLen), loss("loss", 1);
    Kokkos::deep_copy(mask, 1.0f);
    trainer->forward_backward(mask.data(), 1.0f / (kRows * kLen), loss.data());
    trainer->optimizer_step();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
    return {render(rows, out), h(0)};
  }
};

// Rollout and train take turns in one arena of max(rollout, train) transient bytes, the arena
// poisoned with NaN at every phase change; the results equal those of a job whose phases each
// hold their own memory, and alternating allocates nothing.
TEST(Rollout, PhasesShareOneArenaAndGiveTheSameResults) {
  static std::unique_ptr<Communicator> comm = make_communicator(
      has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD, 120.0);
  std::vector<std::pair<std::string, float>> separate;
  std::int64_t separate_transient = 0;
  {
    AlternatingJob job(*comm, false);
    separate_transient = job.ledger_delta - job.persistent_delta;
    for (int it = 0; it < 3; ++it) separate.push_back(job.round(it));
  }
  AlternatingJob job(*comm, true);
  const PhaseArena& arena = *job.arena;
  // The larger phase's buffers, each rounded up to 256 bytes: not both phases' sum.
  std::int64_t train_bytes = 0, rollout_bytes = 0;
  for (int c = 0; c < kMemoryCategories; ++c) {
    train_bytes += arena.phase_bytes(Phase::train, static_cast<MemoryCategory>(c));
    rollout_bytes += arena.phase_bytes(Phase::rollout, static_cast<MemoryCategory>(c));
  }
  const std::int64_t larger = std::max(train_bytes, rollout_bytes);
  ASSERT_GT(std::min(train_bytes, rollout_bytes), 64 * 1024) << "both phases hold buffers";
  EXPECT_GE(static_cast<std::int64_t>(arena.required_bytes()), larger);
  EXPECT_LT(static_cast<std::int64_t>(arena.required_bytes()), larger + 64 * 1024) << "alignment only";
  EXPECT_EQ(arena.bytes(), static_cast<std::int64_t>(arena.required_bytes()) + 256) << "and room to align its start";
  // Outside the arena, the same in both jobs: the batch's ids, the draw buffers, the optimizer's
  // scalars (a few KiB).
  const std::int64_t outside = job.ledger_delta - job.persistent_delta - arena.bytes();
  EXPECT_GT(outside, 0);
  EXPECT_LT(outside, arena.bytes() / 100);
  std::int64_t both = 0;
  for (int c = 0; c < kMemoryCategories; ++c)
    for (Phase p : {Phase::train, Phase::rollout}) both += arena.phase_bytes(p, static_cast<MemoryCategory>(c));
  EXPECT_EQ(separate_transient - outside, both) << "the separate job holds both phases' buffers";
  EXPECT_LT(arena.bytes(), both);
  EXPECT_GT(arena.phase_bytes(Phase::rollout, MemoryCategory::kv_cache), 0);
  EXPECT_GT(arena.phase_bytes(Phase::rollout, MemoryCategory::gather), 0);
  // The train phase's gather slots: at one rank views of the slices, owning nothing.
  EXPECT_EQ(arena.phase_bytes(Phase::train, MemoryCategory::gather) > 0, comm->size() > 1);

  const std::int64_t total = MemoryLedger::instance().total();
  for (int it = 0; it < 3; ++it) {
    // Identical arithmetic; the GPU's atomic embedding gradient may reorder one sum.
    auto [text, loss] = job.round(it);
    EXPECT_EQ(text, separate[it].first) << "iteration " << it;
    EXPECT_NEAR(loss, separate[it].second, 1e-6f * std::abs(separate[it].second)) << "iteration " << it;
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_EQ(MemoryLedger::instance().total(), total) << "a phase allocated anew";
  }
}

TEST(Rollout, PromptSplitCoversTheBatchOnce) {
  for (int ranks : {1, 2, 3, 4, 7})
    for (std::int64_t prompts : {0, 1, 5, 8, 13}) {
      std::int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        auto [b, e] = prompts_of_rank(prompts, ranks, r);
        EXPECT_EQ(b, next);
        EXPECT_LE(e - b, prompts / ranks + 1);
        EXPECT_GE(e - b, prompts / ranks);
        next = e;
      }
      EXPECT_EQ(next, prompts);
    }
}

}  // namespace
}  // namespace shardrl
