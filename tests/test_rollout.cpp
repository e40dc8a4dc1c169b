// Rollout across ranks: weights gathered from the shards into a full set, prompts split by
// rank, samples generated; the union over ranks equals what one rank generates for the whole
// batch from an unsharded model with the same seed (np 1, 2 and 4).
#include <gtest/gtest.h>

#include <sstream>

#include "config/load.hpp"
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
  weights.materialize(trainer);

  auto [begin, end] = prompts_of_rank(kPrompts, comm->size(), comm->rank());
  std::vector<GenerationRow> mine = rows_for(begin, end);
  std::string text;
  if (!mine.empty()) {
    Generator gen(opts(1, 1), static_cast<int>(mine.size()), 16, ExecSpace());
    text = render(mine, gen.generate(weights.units(), mine, SamplingOptions{}, kNew, 11, 2, 258));
  }
  std::vector<std::string> parts = gather_strings(MPI_COMM_WORLD, text, 0);
  if (comm->rank() != 0) return;
  std::string all;
  for (const auto& p : parts) all += p;

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
