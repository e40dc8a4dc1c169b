// Pre-tokenized datasets in the RL loop: rows filled and packed by hand, a custom vocabulary with
// its own EOS learnt, and an id beyond the vocabulary stopping every rank with the dataset line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "grpo_loop_test_support.hpp"
#include "mpi/host_exchange.hpp"
#include "model/scored_tokens.hpp"
#include "rl/sequence.hpp"
#include "rl/task.hpp"

namespace shardrl {
namespace {

using namespace grpo_loop_test;

namespace fs = std::filesystem;

// Dataset files of a test, written by rank 0 and read by every rank; removed at the end of the
// test (every rank past its reads first).
class SharedDatasets {
 public:
  SharedDatasets() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    if (rank_ == 0) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      dir_ = (fs::temp_directory_path() / ("shardrl_grpo_loop_" + std::to_string(getpid()) + "_" + info->name()))
                 .string();
      fs::remove_all(dir_);
      fs::create_directories(dir_);
    }
    broadcast_string(MPI_COMM_WORLD, dir_, 0);
  }
  ~SharedDatasets() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (rank_ == 0) fs::remove_all(dir_, ec);
  }
  SharedDatasets(const SharedDatasets&) = delete;
  SharedDatasets& operator=(const SharedDatasets&) = delete;

  // Writes `text` to <dir>/<name> and returns its path, once every rank can read it.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (fs::path(dir_) / name).string();
    if (rank_ == 0) std::ofstream(path, std::ios::binary) << text;
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
  }

 private:
  int rank_ = 0;
  std::string dir_;
};

// A model with its own 32-token vocabulary (the byte tokenizer's BOS 256, EOS 257 and PAD 258 are
// all beyond it) on a pre-tokenized dataset that ends completions with id 2.
constexpr int kVocab = 32;
constexpr int kEos = 2;

Config pre_tokenized_config(const std::string& dataset) {
  Config c = small_config();
  c.model.preset = "custom";
  c.model.vocab_size = kVocab;
  c.rl.task = "jsonl";
  c.rl.dataset = dataset;
  c.rl.eos_id = kEos;
  c.rl.partial_credit = false;   // jsonl: exact match only
  return c;
}

// Four prompts [1, 10 + a] with two-token answers [20 + a, 26 - a]: learnable by a warm-up.
std::string learnable_lines() {
  std::string text;
  for (int a = 0; a < 4; ++a)
    text += "{\"prompt_ids\": [1, " + std::to_string(10 + a) + "], \"answer_ids\": [" + std::to_string(20 + a) + ", " +
            std::to_string(26 - a) + "]}\n";
  return text;
}

// Whether `ok` holds on every rank.
bool on_every_rank(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// Padding takes the given id; only the trained positions have targets (the head scores them
// alone): the prompt's and the padding's are kUnscoredTarget.
TEST(FillRows, PadsWithTheGivenIdAndTargetsTheTrainedPositionsOnly) {
  constexpr std::int32_t U = kUnscoredTarget;
  Sequence s;
  s.ids = {1, 10, 20, 26, kEos};   // the last id is only a target
  s.prompt_len = 2;
  std::vector<std::int32_t> tokens, targets, row_tokens;
  fill_rows({s}, 0, 1, 2, 6, 31, tokens, targets, row_tokens);   // the second row is all padding
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{1, 10, 20, 26, 31, 31, 31, 31, 31, 31, 31, 31}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{U, 20, 26, kEos, U, U, U, U, U, U, U, U}));
  EXPECT_EQ(row_tokens, (std::vector<std::int32_t>{4, 0}));
  fill_rows({s}, 0, 1, 1, 6, 258, tokens, targets, row_tokens);
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{1, 10, 20, 26, 258, 258}));
  EXPECT_EQ(targets, (std::vector<std::int32_t>{U, 20, 26, kEos, U, U}));
  EXPECT_EQ(row_tokens, (std::vector<std::int32_t>{4}));
}

Sequence sequence_of(int positions, std::int32_t first_id) {
  Sequence s;
  for (int t = 0; t <= positions; ++t) s.ids.push_back(first_id + t);
  s.prompt_len = 1;
  return s;
}

// First fit in order: each sequence goes into the first row with room; without packing one per
// row. Slots, tokens, targets and positions of the packed rows by hand.
TEST(PackRows, FirstFitInOrderWithPositionsRestarting) {
  const std::vector<Sequence> seqs = {sequence_of(5, 10), sequence_of(4, 20), sequence_of(2, 30),
                                      sequence_of(3, 40), sequence_of(1, 50)};
  const PackedRows p = pack_rows(seqs, 0, 5, 8, true);
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0], (std::vector<int>{0, 2, 4}));   // 5 + 2 + 1 = 8
  EXPECT_EQ(p.rows[1], (std::vector<int>{1, 3}));      // 4 + 3 = 7
  EXPECT_EQ(p.offset_of, (std::vector<int>{0, 0, 5, 4, 7}));
  EXPECT_EQ(p.slot(seqs, 0, 3, 0, 0), std::size_t(8 + 4));   // row 1, offset 4, trained token 0 at position 0
  EXPECT_EQ(p.slot(seqs, 0, 3, 2, 1), std::size_t(4 + 2));   // with row 1 the micro-batch's first
  std::vector<std::int32_t> tokens, targets, positions, row_tokens;
  fill_packed_rows(seqs, p, 1, 2, 99, tokens, targets, positions, row_tokens);   // row 1, then a row of padding
  EXPECT_EQ(tokens, (std::vector<std::int32_t>{20, 21, 22, 23, 40, 41, 42, 99, 99, 99, 99, 99, 99, 99, 99, 99}));
  constexpr std::int32_t U = kUnscoredTarget;   // padding (the one-id prompts' positions are trained)
  EXPECT_EQ(targets, (std::vector<std::int32_t>{21, 22, 23, 24, 41, 42, 43, U, U, U, U, U, U, U, U, U}));
  EXPECT_EQ(positions, (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(row_tokens, (std::vector<std::int32_t>{7, 0}));
  const PackedRows one = pack_rows(seqs, 1, 4, 8, false);
  ASSERT_EQ(one.rows.size(), 3u);
  EXPECT_EQ(one.row_of, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(one.offset_of, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(row_length(seqs, 0, 5, 4, 64), 8);    // longest 5 positions, rounded up to 4s
  EXPECT_EQ(row_length(seqs, 0, 5, 32, 6), 6);    // at most max_len
}

// The warm-up trains on prompt_ids + answer_ids + rl.eos_id, rollout stops at rl.eos_id and the
// reward compares ids: an untrained policy never answers, a warmed-up one nearly always does, and
// RL keeps it there; every rank follows one rank's trajectory.
TEST(GrpoLoop, PreTokenizedDatasetWithItsOwnEosIsLearnt) {
  SharedDatasets files;
  Config c = pre_tokenized_config(files.write("learnable.jsonl", learnable_lines()));
  c.rl.sft_steps = 80;   // warm-up loss ~0.002 per token: nearly every sample is exact
  std::vector<double> world, one;
  double untrained = -1;
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
    Job job(c, comm);
    if (comm == MPI_COMM_WORLD) untrained = job.loop.rollout(0).reward_mean;
    const std::vector<double> losses = job.warm_up();
    // A fresh model starts near ln(32): the head has the dataset's vocabulary.
    EXPECT_NEAR(losses.front(), std::log(double(kVocab)), 0.3);
    EXPECT_LT(losses.back(), 0.02);
    std::vector<double>& rewards = comm == MPI_COMM_WORLD ? world : one;
    for (int it = 0; it < 3; ++it) {
      RolloutBatch b = job.loop.rollout(it);
      // Completions stop at id 2 (two answer ids and EOS), not at max_new_tokens = 8.
      EXPECT_LE(b.response_len_mean, 3.5) << "iteration " << it;
      TrainStats t = job.loop.train(b);
      ASSERT_TRUE(std::isfinite(t.loss) && std::isfinite(t.grad_norm)) << "iteration " << it;
      rewards.push_back(b.reward_mean);
    }
  }
  EXPECT_LT(untrained, 0.05);
  double mean = 0;
  for (int it = 0; it < 3; ++it) {
    expect_close(world[it], one[it], "reward", it);
    EXPECT_GE(world[it], 0.8) << "iteration " << it;
    mean += world[it] / 3;
  }
  EXPECT_GE(mean, 0.9);
}

// Index of the first example of phase 0's batch (the warm-up's or the rollout's) drawn from line
// 2 of c's dataset, found as the loop finds it; -1 when the batch never draws it.
std::int64_t first_draw_of_line_2(const Config& c, bool warm_up) {
  TaskOptions o;
  o.name = "jsonl";
  o.dataset_path = c.rl.dataset;
  o.eos_id = c.rl.eos_id;
  const auto task = make_task(o);
  const auto seed = static_cast<std::uint64_t>(c.run.seed) + (warm_up ? 1 : 0);
  const std::int64_t count = warm_up ? c.rl.sft_batch_size : c.rl.prompts_per_iteration;
  for (std::int64_t i = 0; i < count; ++i)
    if (task->example(seed, 0, i).source == c.rl.dataset + ":2") return i;
  return -1;
}

// The InputError a job of c stops with at its start or in phase 0 (its warm-up step or its
// rollout), on this rank.
std::string stop_message(const Config& c, bool warm_up) {
  try {
    Job job(c, MPI_COMM_WORLD);
    if (warm_up) job.loop.warmup_step(0);
    else job.loop.rollout(0);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// An id beyond model.vocab_size would index past the embedding: the job checks every line of the
// dataset on every rank when it starts (before, when a batch first drew it: 38 iterations into a
// run, in one review's case), so every rank stops with the same InputError naming the line,
// before any collective (no rank hangs) and before any compute.
TEST(GrpoLoop, IdBeyondTheVocabularyStopsEveryRank) {
  const std::string good = "{\"prompt_ids\": [1, 10], \"answer_ids\": [20, 26]}\n";
  struct Case {
    const char* name;
    std::string bad_line;
    const char* field_and_id;
  };
  const Case cases[] = {
      {"prompt.jsonl", "{\"prompt_ids\": [1, 40], \"answer_ids\": [21, 25]}\n",
       "field \"prompt_ids\" element 1 is id 40"},
      {"answer.jsonl", "{\"prompt_ids\": [1, 11], \"answer_ids\": [21, 32]}\n",
       "field \"answer_ids\" element 1 is id 32"},
  };
  SharedDatasets files;
  for (const Case& k : cases) {
    const Config c = pre_tokenized_config(files.write(k.name, good + k.bad_line));
    const std::string expected =
        fmt::format("{}:2: {}, outside the model's vocabulary (model.vocab_size = 32; every line is checked when the "
                    "job starts)",
                    c.rl.dataset, k.field_and_id);
    const std::string message = stop_message(c, false);
    EXPECT_EQ(message, expected) << k.name;
    EXPECT_TRUE(on_every_rank(message == expected)) << k.name << ": some rank did not stop with the message";
  }
}

// An example longer than its phase allows names its dataset line (it named only its place in the
// batch, so one bad line among many could not be found), and stops every rank alike.
TEST(GrpoLoop, ExampleTooLongIsNamedByItsDatasetLine) {
  const std::string good = "{\"prompt_ids\": [1, 10], \"answer_ids\": [20, 26]}\n";
  std::string long_ids = "21";
  for (int k = 0; k < 39; ++k) long_ids += ", 21";
  struct Case {
    const char* name;
    std::string bad_line;
    bool warm_up;
    const char* what;
    std::int64_t max_seq_len = 0;   // the model's, where not the config's
  };
  const Case cases[] = {
      {"long_answer.jsonl", "{\"prompt_ids\": [1, 11], \"answer_ids\": [" + long_ids + "]}\n", true,
       "warm-up example {} of step 0 has 43 tokens; train.seq_len = 32 holds at most 33"},
      // A prompt too long is found when the job starts (every line is checked then).
      {"long_prompt.jsonl", "{\"prompt_ids\": [1, " + long_ids + "], \"answer_ids\": [21, 25]}\n", false,
       "its prompt (every line is checked when the job starts) has 41 tokens; with rollout.max_new_tokens = 8 it needs "
       "train.seq_len >= 48 (now 32)"},
      // The generator's limit is the model's max_seq_len: named with it, not blamed on seq_len alone.
      {"long_prompt_small_model.jsonl", "{\"prompt_ids\": [1, " + long_ids + "], \"answer_ids\": [21, 25]}\n",
       false,
       "its prompt (every line is checked when the job starts) has 41 tokens; with rollout.max_new_tokens = 8 it needs "
       "train.seq_len >= 48 (now 32) and model.max_seq_len >= 49 (now 32)",
       32},
  };
  SharedDatasets files;
  for (const Case& k : cases) {
    Config c = pre_tokenized_config(files.write(k.name, good + k.bad_line));
    if (k.max_seq_len > 0) c.model.max_seq_len = k.max_seq_len;
    // The warm-up's example is found when a batch draws it; a prompt when the job starts.
    std::string expected = c.rl.dataset + ":2: " + k.what;
    if (k.warm_up) {
      const std::int64_t first_bad = first_draw_of_line_2(c, true);
      ASSERT_GE(first_bad, 0) << "the batch never draws line 2: the test proves nothing";
      expected = c.rl.dataset + ":2: " + fmt::format(fmt::runtime(k.what), first_bad);
    }
    const std::string message = stop_message(c, k.warm_up);
    EXPECT_EQ(message, expected) << k.name;
    EXPECT_TRUE(on_every_rank(message == expected)) << k.name << ": some rank did not stop with the message";
  }
}

// A generated task's longest prompt is checked when the job starts: a completion that cannot
// follow it stopped the job only at the first rollout, after the whole warm-up.
TEST(GrpoLoop, AGeneratedTasksLongestPromptIsCheckedWhenTheJobStarts) {
  Config c = small_config();
  c.rollout.max_new_tokens = 30;
  EXPECT_EQ(stop_message(c, true),
            "the longest prompt of rl.task = \"sort\" at rl.difficulty = 2 has 11 tokens; with rollout.max_new_tokens = "
            "30 it needs train.seq_len >= 40 (now 32)");
}

}  // namespace
}  // namespace shardrl
