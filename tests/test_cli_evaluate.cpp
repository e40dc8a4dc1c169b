// `shardrl evaluate` against the run's own evaluations: a checkpoint scores what the run's final
// evaluation scored and the config's fresh model what its first one did (the draws are the seed's
// and the prompt's alone), at 1 and 2 ranks, also with the training split gone; another split
// through --dataset; refusals before any work (no split, another task, an --out that cannot be
// written).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_text_harness.hpp"

namespace cli_test {
namespace {

// The eval/* fields of a metrics.jsonl record or of evaluate's --out file.
nlohmann::json eval_fields_of(const nlohmann::json& record) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : record.items())
    if (key.rfind("eval/", 0) == 0) out[key] = value;
  return out;
}

// metrics.jsonl's record at `iteration` that carries an evaluation.
nlohmann::json eval_record(const fs::path& metrics, std::int64_t iteration) {
  const std::string text = slurp(metrics);
  for (std::size_t begin = 0, end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    nlohmann::json record = nlohmann::json::parse(text.substr(begin, end - begin));
    if (record["iteration"] == iteration && record.contains("eval/pass@1")) return record;
  }
  return nullptr;
}

TEST(Cli, EvaluateScoresACheckpointAsItsRunsEvaluationDid) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  fs::path dir = test_dir();
  ASSERT_EQ(make_math_data(dir, 6), "");
  // A reward of every completion's length (x 1000, plus the prompt's): the mean rewards move with
  // any token drawn differently.
  write(dir / "job.toml",
        "[run]\nname = \"ev\"\niterations = 2\n" + tiny_qwen3_model() +
        "[train]\nmicro_batch_size = 4\nseq_len = 128\n[rollout]\nmax_new_tokens = 12\n"
        "[rl]\ntask = \"text\"\ndataset = \"data/train.jsonl\"\neval_dataset = \"data/eval.jsonl\"\n"
        "reward = \"command\"\nreward_command = [\"python3\", \"" + std::string(SHARDRL_SOURCE_DIR) +
        "/tests/reward_commands/text_length.py\"]\n"
        "template_variables = '{\"enable_thinking\": false}'\nprompts_per_iteration = 4\nsamples_per_prompt = 2\n"
        "eval_interval = 2\neval_samples = 3\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path metrics = dir / "runs" / "ev" / "metrics.jsonl";
  const nlohmann::json first = eval_record(metrics, 0), last = eval_record(metrics, 2);
  ASSERT_FALSE(first.is_null()) << slurp(metrics);
  ASSERT_FALSE(last.is_null()) << slurp(metrics);
  ASSERT_NE(eval_fields_of(first), eval_fields_of(last)) << "training moved nothing: the comparisons below are blind";

  // The final checkpoint, under its run's own config (np 2) and under --config (np 1).
  const std::string ckpt = "runs/ev/checkpoints/iter_00000002.h5";
  RunResult two = run_in(dir, mpirun(2) + " evaluate --checkpoint " + ckpt + " --out out/two.json");
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_EQ(two.out.rfind("eval 6 prompts | pass@1 ", 0), 0u) << two.out;
  const nlohmann::json two_json = nlohmann::json::parse(slurp(dir / "out" / "two.json"));
  EXPECT_EQ(eval_fields_of(two_json), eval_fields_of(last)) << two_json.dump() << "\n" << last.dump();
  EXPECT_EQ(two_json["prompts"], 6);
  EXPECT_EQ(two_json["k"], 3);
  EXPECT_EQ(two_json["checkpoint"], ckpt);
  EXPECT_EQ(two_json["eval_dataset"], "data/eval.jsonl");
  RunResult one = run_in(dir, mpirun(1) + " evaluate --config job.toml --checkpoint " + ckpt + " --out one.json");
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_EQ(eval_fields_of(nlohmann::json::parse(slurp(dir / "one.json"))), eval_fields_of(last));

  // The config's model before any training: the run's first evaluation (no warm-up: the seed's weights).
  RunResult fresh = run_in(dir, mpirun(2) + " evaluate --config job.toml --out fresh.json");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.out << fresh.err;
  const nlohmann::json fresh_json = nlohmann::json::parse(slurp(dir / "fresh.json"));
  EXPECT_EQ(eval_fields_of(fresh_json), eval_fields_of(first));
  EXPECT_TRUE(fresh_json["checkpoint"].is_null());

  // Another split: --dataset, in a config that names none and has no interval.
  std::string plain = slurp(dir / "job.toml");
  write(dir / "plain.toml", plain.insert(plain.find("eval_dataset"), "# "));
  RunResult other = run_in(dir, mpirun(1) + " evaluate --config plain.toml --checkpoint " + ckpt +
                                    " --set rl.eval_interval=0 --dataset data/train.jsonl");
  ASSERT_EQ(other.exit_code, 0) << other.out << other.err;
  EXPECT_EQ(other.out.rfind("eval 64 prompts | ", 0), 0u) << other.out;

  // Refused before any work, exit 2: no split, another task, an --out that names a directory.
  RunResult none = run_in(dir, mpirun(1) + " evaluate --config plain.toml --set rl.eval_interval=0");
  EXPECT_EQ(none.exit_code, 2) << none.out << none.err;
  EXPECT_NE(none.err.find("evaluate needs the split to score: rl.eval_dataset, or --dataset FILE"), std::string::npos)
      << none.err;
  write(dir / "sort.toml", "[run]\nname = \"s\"\n[rl]\ntask = \"sort\"\n");
  RunResult sort = run_in(dir, mpirun(1) + " evaluate --config sort.toml");
  EXPECT_EQ(sort.exit_code, 2) << sort.out << sort.err;
  EXPECT_NE(sort.err.find("evaluate scores the text task's held-out split; this job's rl.task is \"sort\""),
            std::string::npos)
      << sort.err;
  RunResult to_dir = run_in(dir, mpirun(1) + " evaluate --checkpoint " + ckpt + " --out out");
  EXPECT_EQ(to_dir.exit_code, 2) << to_dir.out << to_dir.err;
  EXPECT_NE(to_dir.err.find("--out out: names a directory, not a file"), std::string::npos) << to_dir.err;
  EXPECT_EQ(to_dir.out.find("eval "), std::string::npos) << "refused before evaluating";
  // A reward command that fails while scoring the evaluation: named, exit 2, every rank stopped.
  const std::string exits_early = std::string(SHARDRL_SOURCE_DIR) + "/tests/reward_commands/exits_early.sh";
  RunResult failing = run_in(dir, mpirun(2) + " evaluate --checkpoint " + ckpt +
                                      " --set 'rl.reward_command=[\"/bin/sh\", \"" + exits_early + "\"]'");
  EXPECT_EQ(failing.exit_code, 2) << failing.out << failing.err;
  EXPECT_NE(failing.err.find("exited with status 0 before replying"), std::string::npos) << failing.err;
  // --base: a LoRA checkpoint's, so with --checkpoint, and not for a run that trained the whole model.
  RunResult base = run_in(dir, shardrl_binary() + " evaluate --config job.toml --base elsewhere");
  EXPECT_NE(base.exit_code, 0);
  EXPECT_NE(base.err.find("--checkpoint"), std::string::npos) << base.err;
  RunResult whole = run_in(dir, mpirun(1) + " evaluate --checkpoint " + ckpt + " --base data");
  EXPECT_EQ(whole.exit_code, 2) << whole.out << whole.err;
  EXPECT_NE(whole.err.find("--base data: " + ckpt + " is not a LoRA run's (lora.rank = 0)"), std::string::npos)
      << whole.err;

  // The training split is not read: gone, the checkpoint scores as before.
  fs::rename(dir / "data" / "train.jsonl", dir / "data" / "train.moved");
  RunResult without_train = run_in(dir, mpirun(1) + " evaluate --checkpoint " + ckpt + " --out without_train.json");
  ASSERT_EQ(without_train.exit_code, 0) << without_train.out << without_train.err;
  EXPECT_EQ(eval_fields_of(nlohmann::json::parse(slurp(dir / "without_train.json"))), eval_fields_of(last));
}

}  // namespace
}  // namespace cli_test
