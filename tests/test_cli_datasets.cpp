// A job's prompt dataset, bad from the command line: a malformed line and a pre-tokenized line
// of the wrong kind or beyond the vocabulary are named by file and line; a file only some ranks can
// read stops every rank with its cause. Each exits 2. A resume over other examples than the
// checkpoint's is refused whatever the path; the same examples elsewhere resume. A demonstration
// too long for the warm-up's rows is named before it.
#include "cli_harness.hpp"

namespace {

using namespace cli_test;

// A user's prompt file with a bad line stops every rank with the file and line, exit 2.
TEST(Cli, MalformedDatasetNamesFileAndLine) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\n");
  write(dir / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": 3}\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("shardrl: data.jsonl:2: field \"prompt\" must be a string, got number\n", 0), 0u) << r.err;
  // Text lines are encoded by the byte tokenizer: a vocabulary without its ids is named (it was
  // an internal check at the first rollout, exit 1).
  write(dir / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  RunResult small = run_in(dir, mpirun(2) + " train --config job.toml --set model.preset=\"custom\" "
                                            "--set model.vocab_size=128");
  EXPECT_EQ(small.exit_code, 2) << small.out << small.err;
  EXPECT_NE(small.err.find("model.vocab_size = 128 is too small for the dataset 'data.jsonl': its text is encoded "
                           "by the byte tokenizer, whose ids go up to 258"),
            std::string::npos)
      << small.err;
}

// A pre-tokenized dataset: a line of the other kind is refused with its file and line, an id
// beyond model.vocab_size stops every rank at the job's start with the line, and rl.eos_id is
// required; each exits 2.
TEST(Cli, PreTokenizedDatasetErrorsNameTheLine) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  // The job refused, exit 2, its stderr starting with `message` (every rank stops; rank 0 says why).
  const auto refused = [&](const std::string& message) {
    RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err.rfind("shardrl: " + message, 0), 0u) << r.err;
    return r;
  };
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\neos_id = 5\n");
  write(dir / "data.jsonl", "{\"prompt_ids\": [1, 2], \"answer_ids\": [3]}\n{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  refused("data.jsonl:2: a text line ({\"prompt\", \"answer\"}), but line 1 is a token-id line "
          "({\"prompt_ids\", \"answer_ids\"}); every line of a dataset must be of the same kind\n");

  write(dir / "data.jsonl", "\n{\"prompt_ids\": [1, 300], \"answer_ids\": [3]}\n");
  const RunResult r = refused("data.jsonl:2: field \"prompt_ids\" element 1 is id 300, outside the model's "
                              "vocabulary (model.vocab_size = 259; every line is checked when the job starts)\n");
  EXPECT_EQ(r.err.find("shardrl:", 1), std::string::npos) << "one message, from rank 0: " << r.err;

  // Without rl.eos_id the byte tokenizer's EOS would end completions: refused before training.
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\n");
  refused("rl.eos_id is required with the pre-tokenized dataset 'data.jsonl' (data.jsonl:2 has \"prompt_ids\"): set "
          "it to the id that ends a completion in the dataset's tokenizer\n");
}

// A dataset only some ranks can read (a relative or node-local path, the ranks in different
// directories): every rank stops within seconds with the failing rank's cause, exit 2. Before,
// the failing rank returned silently and the others waited in the set-up's collectives until
// comm.timeout_s (with comm.gather_engine = "sm": for ever, before the watchdog is armed).
TEST(Cli, ADatasetOneRankCannotReadStopsEveryRankWithItsCause) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  write(dir / "a" / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\n[comm]\ntimeout_s = 20\n");
  write(dir / "a" / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  for (const char* engine : {"auto", "sm"}) {
    const std::string job = " train --config " + (dir / "a" / "job.toml").string() + " --set run.dir=" +
                            (dir / "runs").string() + " --set comm.gather_engine=" + engine;
    // Rank 0 runs in a/, which holds the dataset; rank 1 in b/, which does not.
    RunResult r = run_in(dir, mpirun_in_two_dirs(dir / "a", dir / "b", job));
    EXPECT_EQ(r.exit_code, 2) << engine << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("cannot read dataset 'data.jsonl'"), std::string::npos) << engine << "\n" << r.err;
    EXPECT_LT(r.seconds, 60.0) << engine;
  }
}

// The checkpoint records the task's files' checksum (/data/task_checksum) and a resume compares
// it: a dataset edited in place (the same path) is refused with both checksums, exit 2 (it resumed
// silently over other examples); the same lines copied elsewhere (a requeued job's node scratch)
// resume though rl.dataset changed (a path change was refused); --allow-config-change takes the
// edited file. Ranks whose copies differ stop at the start.
TEST(Cli, AResumeComparesTheDatasetsExamplesNotItsPath) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  const std::string lines = "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": \"cd\", \"answer\": \"dc\"}\n";
  write(dir / "job.toml", "[run]\nname = \"ds\"\n[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n[rl]\n"
                          "task = \"jsonl\"\ndataset = \"data.jsonl\"\nprompts_per_iteration = 4\nsamples_per_prompt = 2\n");
  write(dir / "data.jsonl", lines);
  RunResult first = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  RunResult shown = run_in(dir, mpirun(1) + " inspect runs/ds/checkpoints/iter_00000001.h5");
  ASSERT_EQ(shown.exit_code, 0) << shown.out << shown.err;
  const std::size_t at = shown.out.find("task jsonl (files' checksum ");
  ASSERT_NE(at, std::string::npos) << shown.out;
  const std::string saved = shown.out.substr(at + 28, 8);

  write(dir / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"a\"}\n{\"prompt\": \"cd\", \"answer\": \"dc\"}\n");
  const std::string resume = mpirun(2) + " train --config job.toml --set run.iterations=2";
  RunResult edited = run_in(dir, resume);
  EXPECT_EQ(edited.exit_code, 2) << edited.out << edited.err;
  EXPECT_NE(edited.err.find("changes the run's trajectory:\n  the task's files (rl.dataset, and the text task's "
                            "tokenizer and chat template) = checksum " + saved + " -> "),
            std::string::npos)
      << edited.err;

  fs::create_directories(dir / "scratch");
  write(dir / "scratch" / "data.jsonl", lines);
  RunResult moved = run_in(dir, resume + " --set rl.dataset=scratch/data.jsonl");
  EXPECT_EQ(moved.exit_code, 0) << moved.out << moved.err;
  EXPECT_NE(moved.out.find("rl.dataset = \"data.jsonl\" -> \"scratch/data.jsonl\" (the same files: the task's "
                           "checksum is the checkpoint's)"),
            std::string::npos)
      << moved.out;
  RunResult allowed = run_in(dir, resume + " --set run.iterations=3 --allow-config-change");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.out << allowed.err;

  // Ranks that read different copies (rank 1's node-local copy stale: here its own directory's
  // data.jsonl) stop at the start with both checksums, exit 2 (they trained on different examples).
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  write(dir / "a" / "data.jsonl", lines);
  write(dir / "b" / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  const std::string job = " train --config " + (dir / "job.toml").string() + " --set run.dir=" +
                          (dir / "split").string() + " --set run.iterations=1";
  RunResult split = run_in(dir, mpirun_in_two_dirs(dir / "a", dir / "b", job));
  EXPECT_EQ(split.exit_code, 2) << split.out << split.err;
  EXPECT_NE(split.err.find("rank 1 read other task files than rank 0 (their checksums "), std::string::npos)
      << split.err;
  EXPECT_FALSE(fs::exists(dir / "split" / "ds" / "checkpoints")) << "stopped before any save";
}

// A demonstration the warm-up cannot fit in a row (its prompt, answer and EOS past train.seq_len
// + 1) stops every rank before the warm-up, naming its line (it stopped at the step that first
// drew it, maybe far into the run); a generated task's longest likewise, with a warning that
// completions cannot hold its answers. Without a warm-up nothing reads them.
TEST(Cli, ALongDemonstrationStopsTheJobBeforeTheWarmUp) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n[rl]\ntask = \"jsonl\"\n"
                          "dataset = \"data.jsonl\"\nprompts_per_iteration = 4\nsamples_per_prompt = 2\n"
                          "sft_steps = 5\n[run]\niterations = 0\n");
  write(dir / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": \"cd\", \"answer\": \"dc\"}\n"
                            "{\"prompt\": \"e\", \"answer\": \"" + std::string(40, 'e') + "\"}\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("shardrl: data.jsonl:3: the example (every line is checked before the warm-up) has 43 tokens "
                        "with its demonstration (prompt 2, demonstration and EOS 41); the warm-up (rl.sft_steps) "
                        "trains it in a row of train.seq_len + 1 = 33 at most: raise train.seq_len, or drop the line\n",
                        0),
            0u)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "runs" / "shardrl" / "checkpoints")) << "stopped before any step";
  RunResult no_warm_up = run_in(dir, mpirun(2) + " train --config job.toml --no-resume --set rl.sft_steps=0");
  EXPECT_EQ(no_warm_up.exit_code, 0) << no_warm_up.out << no_warm_up.err;

  RunResult added = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=add --set rl.task=add "
                                            "--set rl.dataset=\"\" --set rl.difficulty=8 --set "
                                            "rollout.max_new_tokens=4 --set train.seq_len=30");
  EXPECT_EQ(added.exit_code, 2) << added.out << added.err;
  EXPECT_NE(added.err.find("the longest example of rl.task = \"add\" at rl.difficulty = 8 has 35 tokens with its "
                           "demonstration (prompt 25, demonstration and EOS 10)"),
            std::string::npos)
      << added.err;
  EXPECT_NE(added.out.find("the longest answer and its EOS take 10 tokens, more than rollout.max_new_tokens = 4"),
            std::string::npos)
      << added.out;
}

}  // namespace
