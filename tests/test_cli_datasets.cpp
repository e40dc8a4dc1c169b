// A job's prompt dataset, bad from the command line: a malformed line and a pre-tokenized line
// of the wrong kind or beyond the vocabulary are named by file and line; a file only some ranks can
// read stops every rank with its cause. Each exits 2.
#include "cli_harness.hpp"

namespace {

using namespace cli_test;

// A user's prompt file with a bad line stops every rank with the file and line, exit 2.
TEST(Cli, MalformedDatasetNamesFileAndLine) {
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

}  // namespace
