// End-to-end tests of the shardrl executable as users run it: malformed configurations give
// their exact message and exit code 2 on every rank; a failing or hanging rank stops the whole
// job quickly; the smoke job runs and writes its resolved config.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <vector>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "core/bf16.hpp"
#include "io/safetensors.hpp"

namespace fs = std::filesystem;

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Directories of the running test; removed when it passes, kept (for inspection) when it fails.
std::vector<fs::path>& test_dirs() {
  static std::vector<fs::path> dirs;
  return dirs;
}
struct RemoveDirsOfPassedTests : ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    for (const fs::path& d : test_dirs()) {
      std::error_code ec;
      if (info.result()->Passed()) fs::remove_all(d, ec);
      else std::cerr << "kept for inspection: " << d.string() << "\n";
    }
    test_dirs().clear();
  }
};
const bool kListenerInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RemoveDirsOfPassedTests);
  return true;
}();

// A fresh directory per test, so ctest may run tests in parallel.
fs::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info->name();   // parametrised tests: "Test/param"
  std::replace(name.begin(), name.end(), '/', '_');
  fs::path d = fs::temp_directory_path() / ("shardrl_cli_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  test_dirs().push_back(d);
  return d;
}

// Runs `args` in `dir` under a hard 120 s limit, capturing stdout and stderr.
RunResult run_in(const fs::path& dir, const std::string& args) {
  std::string cmd = "cd '" + dir.string() + "' && timeout -s KILL 120 " + args + " >stdout.txt 2>stderr.txt";
  auto t0 = std::chrono::steady_clock::now();
  int status = std::system(cmd.c_str());
  RunResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir / "stdout.txt");
  r.err = slurp(dir / "stderr.txt");
  return r;
}

std::string shardrl() { return SHARDRL_BINARY; }
// As CI runs it: as root, on a small machine, over shared memory.
std::string mpirun(int np) {
  return "env OPENBLAS_NUM_THREADS=1 " + std::string(SHARDRL_MPIEXEC) + " -np " + std::to_string(np) +
         " --oversubscribe --allow-run-as-root --mca btl self,vader"
         " --mca btl_vader_single_copy_mechanism none " + shardrl();
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

struct BadConfig {
  const char* name;
  const char* toml;
  const char* extra_args;
  const char* expected_stderr;
};

// Each case: the file bad.toml, extra arguments, and the exact stderr of a 1-rank job.
const BadConfig kBadConfigs[] = {
    {"syntax_error", "[run]\nname = \"abc\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:12: TOML syntax error: Error while parsing string: unescaped control characters "
     "other than TAB (U+0009) are explicitly prohibited\n"},
    {"unknown_section", "[trian]\ngradient_accumulation_fusion = true\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:1:1: unknown section [trian] (did you mean [train]?)\n"},
    {"unknown_key", "[run]\nnmae = \"x\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: unknown key 'run.nmae' (did you mean 'run.name'?)\n"},
    {"key_in_wrong_section", "[train]\nseed = 1\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: unknown key 'train.seed' (did you mean 'run.seed'?)\n"},
    {"string_for_integer", "[run]\nseed = \"42\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: run.seed: expected an integer, got a string\n"},
    {"integer_for_boolean", "[train]\ngradient_accumulation_fusion = 1\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:32: train.gradient_accumulation_fusion: expected a boolean (true or false), got an "
     "integer\n"},
    {"float_for_integer", "[run]\niterations = 2.5\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:14: run.iterations: expected an integer, got a float\n"},
    {"negative_iterations", "[run]\niterations = -1\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:14: run.iterations: must be >= 0, got -1\n"},
    {"unknown_precision", "[model]\nprecision = \"fp16\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:13: model.precision: must be one of \"bf16\", \"fp32\", got \"fp16\"\n"},
    {"run_name_with_slash", "[run]\nname = \"a/b\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: run.name: must contain only letters, digits, '-', '_' and '.', got \"a/b\"\n"},
    {"section_not_a_table", "run = 3\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:1:7: 'run' must be a section [run], got an integer\n"},
    {"nested_table", "[run.extra]\nx = 1\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:1:1: unknown key 'run.extra'\n"},
#if defined(SHARDRL_ENABLE_CUDA)
    {"mpi_on_gpu_build", "[comm]\nbackend = \"mpi\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:11: comm.backend = \"mpi\" moves host buffers, but this CUDA build keeps tensors on "
     "the GPU (use \"auto\" or \"nccl\")\n"},
#else
    {"nccl_on_cpu_build", "[comm]\nbackend = \"nccl\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:11: comm.backend = \"nccl\" needs a CUDA build, but this shardrl was built for CPU "
     "(use \"auto\" or \"mpi\")\n"},
#endif
    {"zero_timeout", "[comm]\ntimeout_s = 0\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:13: comm.timeout_s: must be > 0.0, got 0.0\n"},
    {"empty_run_dir", "[run]\ndir = \"\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:7: run.dir: must not be empty\n"},
    {"every_problem_at_once", "[run]\nnmae = \"x\"\nseed = -3\n[model]\npreset = \"gpt5\"\n", "",
     "shardrl: invalid configuration (3 problems):\n"
     "  bad.toml:2:8: unknown key 'run.nmae' (did you mean 'run.name'?)\n"
     "  bad.toml:3:8: run.seed: must be >= 0, got -3\n"
     "  bad.toml:5:10: model.preset: must be one of \"tiny\", \"qwen3-0.6b\", \"llama-1b\", \"custom\", got "
     "\"gpt5\"\n"},
    {"fail_rank_beyond_world", "[debug]\nfail_rank = 3\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:13: debug.fail_rank = 3 but the job has 1 rank (0..0)\n"},
    {"shape_key_beside_named_preset", "[model]\npreset = \"tiny\"\nd_model = 128\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:3:11: model.d_model cannot be set with model.preset = \"tiny\" (the preset fixes the "
     "shape; use preset = \"custom\" to give the shape keys)\n"},
    {"heads_not_divisible", "[model]\npreset = \"custom\"\nn_heads = 4\nn_kv_heads = 3\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:4:14: model.n_heads = 4 is not a multiple of model.n_kv_heads = 3\n"},
    {"seq_len_beyond_model", "[train]\nseq_len = 1000\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:11: train.seq_len = 1000 exceeds the model's max_seq_len = 256\n"},
    {"integer_too_large", "[model]\npreset = \"custom\"\nvocab_size = 99999999999\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:3:14: model.vocab_size: must be <= 2147483647, got 99999999999\n"},
    {"set_without_value", "", "--set run.seed",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set run.seed: expected section.key=value\n"},
    {"set_without_section", "", "--set seed=3",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set seed=3: expected section.key=value (did you mean 'run.seed'?)\n"},
    {"set_unknown_key", "", "--set run.sed=3",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set run.sed=3: unknown key 'run.sed' (did you mean 'run.seed'?)\n"},
    {"set_wrong_type", "", "--set run.seed=abc",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set run.seed=abc: run.seed: expected an integer, got 'abc'\n"},    {"minibatches_do_not_divide_prompts", "[rl]\nprompts_per_iteration = 10\nminibatches = 4\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:3:15: rl.minibatches = 4 does not divide rl.prompts_per_iteration = 10\n"},
    {"jsonl_without_dataset", "[rl]\ntask = \"jsonl\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: rl.task = \"jsonl\" needs rl.dataset (a file of prompt/answer lines)\n"},
    {"dataset_for_builtin_task", "", "--set rl.dataset=x.jsonl",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set rl.dataset=x.jsonl: rl.dataset is read only by rl.task = \"jsonl\", not \"sort\"\n"},
    {"unknown_task", "[rl]\ntask = \"sotr\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: rl.task: must be one of \"sort\", \"add\", \"reverse\", \"jsonl\", got \"sotr\"\n"},
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, ExactMessageAndExitCode2) {
  const BadConfig& c = GetParam();
  fs::path dir = test_dir();
  write(dir / "bad.toml", c.toml);
  RunResult r = run_in(dir, shardrl() + " train --config bad.toml " + c.extra_args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, c.expected_stderr);
  EXPECT_FALSE(fs::exists(dir / "runs")) << "nothing may be written for an invalid config";
}

INSTANTIATE_TEST_SUITE_P(Malformed, BadConfigTest, ::testing::ValuesIn(kBadConfigs),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Cli, MissingConfigFileNamesIt) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, shardrl() + " train --config nowhere.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "shardrl: invalid configuration (1 problem):\n"
            "  cannot read config file 'nowhere.toml': No such file or directory\n");
}

TEST(Cli, UsageErrorsExit2) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, shardrl() + " train");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shardrl: --config is required\nRun 'shardrl --help' for usage.\n");
  r = run_in(dir, shardrl());
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Cli, HelpAndVersion) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, shardrl() + " --version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("shardrl ", 0), 0u) << r.out;
  r = run_in(dir, shardrl() + " train --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--set"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--log-all-ranks"), std::string::npos) << r.out;
}

// At np 2 every rank reaches the same verdict: one message, exit code 2, no hang.
TEST(Cli, InvalidConfigStopsEveryRankWithOneMessage) {
  fs::path dir = test_dir();
  write(dir / "bad.toml", "[run]\nseed = \"x\"\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config bad.toml");
  EXPECT_EQ(r.exit_code, 2);
  // mpirun appends its own note on the non-zero exit; ours comes first, once.
  const std::string ours =
      "shardrl: invalid configuration (1 problem):\n"
      "  bad.toml:2:8: run.seed: expected an integer, got a string\n";
  EXPECT_EQ(r.err.substr(0, ours.size()), ours) << r.err;
  EXPECT_EQ(r.err.find("invalid configuration", ours.size()), std::string::npos) << r.err;
}

// The first and last "loss X" of a job's progress lines.
// The warm-up losses of the progress lines ("warm-up i/n | loss x"), in order.
std::vector<double> warmup_losses(const std::string& out) {
  std::vector<double> losses;
  for (std::size_t pos = 0; (pos = out.find("| loss ", pos)) != std::string::npos; pos += 7)
    if (out.rfind("warm-up ", pos) != std::string::npos && out.rfind("warm-up ", pos) > out.rfind('\n', pos))
      losses.push_back(std::stod(out.substr(pos + 7)));
  return losses;
}

TEST(Cli, JobTrainsAndWritesResolvedConfig) {
  fs::path dir = test_dir();
  write(dir / "job.toml",
        "[run]\nname = \"smoke\"\niterations = 3\n[model]\nprecision = \"fp32\"\n"
        "[train]\nseq_len = 32\n[optim]\nlr = 3e-3\n[rollout]\nmax_new_tokens = 12\n"
        "[rl]\nsft_steps = 20\nprompts_per_iteration = 4\nsamples_per_prompt = 4\n[debug]\ncheck_released = true\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set run.seed=7 --log-all-ranks");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("collectives checked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warm-up 20/20 | loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("iter 3/3 | reward "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: 3 iterations (3 in this job) in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("23 optimizer steps, 0 skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run.seed                            7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory per rank (MiB)"), std::string::npos) << r.out;
  // A fresh model starts near ln(vocab) = 5.56; the demonstrations are learnable.
  std::vector<double> losses = warmup_losses(r.out);
  ASSERT_GE(losses.size(), 2u) << r.out;
  EXPECT_NEAR(losses.front(), std::log(259.0), 0.15);
  EXPECT_LT(losses.back(), losses.front() - 1.0) << r.out;
  // One metrics record per iteration, with every field a user plots.
  std::istringstream metrics(slurp(dir / "runs" / "smoke" / "metrics.jsonl"));
  std::string line;
  int records = 0;
  while (std::getline(metrics, line)) {
    EXPECT_EQ(line.rfind("{\"iteration\":" + std::to_string(records) + ",", 0), 0u) << line;
    for (const char* key : {"reward_mean", "reward_std", "pass_rate", "response_len_mean", "entropy", "kl", "clip_frac",
                            "grad_norm", "loss", "lr", "rollout_tokens_per_s", "train_tokens_per_s", "mem_peak_bytes"})
      EXPECT_NE(line.find(std::string("\"") + key + "\":"), std::string::npos) << key << " in " << line;
    ++records;
  }
  EXPECT_EQ(records, 3);
  // The device report lists every rank, in rank order, once.
  auto r0 = r.out.find("rank 0/2  host "), r1 = r.out.find("rank 1/2  host ");
  ASSERT_NE(r0, std::string::npos);
  ASSERT_NE(r1, std::string::npos);
  EXPECT_LT(r0, r1);
  EXPECT_NE(r.out.find("[rank 1] done"), std::string::npos) << "--log-all-ranks shows rank 1";
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "no colour codes when not a terminal";
  std::string written = slurp(dir / "runs" / "smoke" / "config.toml");
  EXPECT_NE(written.find("seed = 7\n"), std::string::npos) << written;
  EXPECT_NE(written.find("precision = \"fp32\"\n"), std::string::npos) << written;
  // The resolved config is itself a valid config and resolves to the same file.
  RunResult again = run_in(dir, shardrl() + " train --config runs/smoke/config.toml --set run.name=again "
                                             "--set run.iterations=1");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  std::string rewritten = slurp(dir / "runs" / "again" / "config.toml");
  std::string expected = written;
  expected.replace(expected.find("name = \"smoke\""), 14, "name = \"again\"");
  expected.replace(expected.find("iterations = 3"), 14, "iterations = 1");
  EXPECT_EQ(rewritten, expected);
}

// The main job, shortened: a short warm-up leaves the policy mostly wrong, then GRPO alone
// lifts the mean reward (fraction of exactly sorted lists) from below 0.3 to above 0.8.
TEST(Cli, ShortQuickstartRaisesTheRewardByRl) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, mpirun(2) + " train --config " + std::string(SHARDRL_SOURCE_DIR) +
                                "/configs/quickstart.toml --set run.dir=runs --set rl.sft_steps=60");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::istringstream metrics(slurp(dir / "runs" / "quickstart" / "metrics.jsonl"));
  std::vector<double> reward;
  for (std::string line; std::getline(metrics, line);) {
    const auto at = line.find("\"reward_mean\":");
    ASSERT_NE(at, std::string::npos) << line;
    reward.push_back(std::stod(line.substr(at + 14)));
  }
  ASSERT_EQ(reward.size(), 200u);
  double last = 0;
  for (std::size_t i = reward.size() - 20; i < reward.size(); ++i) last += reward[i] / 20;
  EXPECT_LT(reward.front(), 0.3);
  EXPECT_GT(last, 0.8) << "mean reward of the last 20 iterations";
}

// A user's prompt file with a bad line stops every rank with the file and line, exit 2.
TEST(Cli, MalformedDatasetNamesFileAndLine) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\n");
  write(dir / "data.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": 3}\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("shardrl: data.jsonl:2: field \"prompt\" must be a string, got number\n", 0), 0u) << r.err;
}

// A pre-tokenized dataset: a line of the other kind is refused with its file and line, an id
// beyond model.vocab_size stops every rank at the first rollout with the line, and rl.eos_id is
// required; each exits 2.
TEST(Cli, PreTokenizedDatasetErrorsNameTheLine) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\neos_id = 5\n");
  write(dir / "data.jsonl", "{\"prompt_ids\": [1, 2], \"answer_ids\": [3]}\n{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("shardrl: data.jsonl:2: a text line ({\"prompt\", \"answer\"}), but line 1 is a token-id line "
                        "({\"prompt_ids\", \"answer_ids\"}); every line of a dataset must be of the same kind\n",
                        0),
            0u)
      << r.err;

  write(dir / "data.jsonl", "\n{\"prompt_ids\": [1, 300], \"answer_ids\": [3]}\n");
  r = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("shardrl: data.jsonl:2: field \"prompt_ids\" element 1 is id 300, outside the model's "
                        "vocabulary (model.vocab_size = 259; prompt 0 of iteration 0)\n",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(r.err.find("shardrl:", 1), std::string::npos) << "one message, from rank 0: " << r.err;

  // Without rl.eos_id the byte tokenizer's EOS would end completions: refused before training.
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"data.jsonl\"\n");
  r = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("shardrl: rl.eos_id is required with the pre-tokenized dataset 'data.jsonl' (data.jsonl:2 has "
                        "\"prompt_ids\"): set it to the id that ends a completion in the dataset's tokenizer\n",
                        0),
            0u)
      << r.err;
}

TEST(Cli, ProfilePrintsThePerStepBreakdown) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 2\n[rl]\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --profile");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // tiny (untied, 4 units), one micro-batch per rank: the rollout gathers the 4 units once,
  // the old log-probabilities take a forward (4), the train step 4 all-gathers in forward and
  // 3 in backward (the head stays gathered): 15. 4 reduce-scatters, one 8-byte all-reduce for
  // the gradient norm.
  EXPECT_NE(r.out.find("profile: all-gather"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(15 x,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reduce-scatter"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(4 x,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-reduce 8 B"), std::string::npos) << r.out;
}

TEST(Cli, GenerateIsDeterministicOneLinePerCompletion) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\nseed = 3\n");
  const std::string cmd = shardrl() + " generate --config job.toml --prompt \"add: 1+2=\" --n 4 --max-new-tokens 12";
  RunResult a = run_in(dir, cmd), b = run_in(dir, cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(std::count(a.out.begin(), a.out.end(), '\n'), 4) << a.out;
  EXPECT_EQ(a.out, b.out) << "the same seed draws the same completions";
  RunResult other = run_in(dir, cmd + " --seed 4");
  EXPECT_NE(other.out, a.out);
  // Greedy: every sample is the same most likely completion.
  RunResult greedy = run_in(dir, cmd + " --temperature 0");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  std::istringstream lines(greedy.out);
  std::string first, line;
  std::getline(lines, first);
  while (std::getline(lines, line)) EXPECT_EQ(line, first);
  RunResult bad = run_in(dir, cmd + " --top-p 1.5");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "shardrl: invalid configuration (1 problem):\n"
            "  --set rollout.top_p=1.5: rollout.top_p: must be <= 1.0, got 1.5\n");
}

// A prompt as token ids (a model with its own tokenizer): completions printed as ids, ending at
// rl.eos_id; the ids of BOS and a text's bytes draw what the text draws. Bad ids and a prompt
// given both ways are refused.
TEST(Cli, GenerateFromTokenIds) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\nseed = 5\n");
  const std::string base = shardrl() + " generate --config job.toml --n 3 --max-new-tokens 10";
  RunResult text = run_in(dir, base + " --prompt \"ab\"");
  RunResult ids = run_in(dir, base + " --prompt-ids \"256 97,98\"");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::istringstream text_lines(text.out), id_lines(ids.out);
  // Each id line, as `generate` prints text: the bytes (BOS and PAD dropped), newline, backslash
  // and control bytes escaped.
  std::string t, i;
  int compared = 0;
  while (std::getline(id_lines, i)) {
    ASSERT_TRUE(std::getline(text_lines, t));
    std::istringstream in(i);
    std::string printed;
    int id = 0, count = 0;
    while (in >> id) {
      ASSERT_LT(id, 259) << i;
      ASSERT_NE(id, 257) << "the completion ends before EOS: " << i;
      ++count;
      const unsigned char c = static_cast<unsigned char>(id);
      if (id >= 256) continue;
      if (c == '\n') printed += "\\n";
      else if (c == '\\') printed += "\\\\";
      else if (c < 0x20 || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        printed += hex;
      }
      else printed += static_cast<char>(c);
    }
    EXPECT_LE(count, 10) << i;
    EXPECT_EQ(printed, t) << "the same draw as the text prompt: " << i;
    ++compared;
  }
  EXPECT_FALSE(std::getline(text_lines, t)) << "as many lines";
  EXPECT_EQ(compared, 3) << ids.out << text.out;
  // Greedy with a custom EOS: no completion contains it.
  RunResult custom = run_in(dir, base + " --prompt-ids \"256 97\" --temperature 0 --set rl.eos_id=98");
  ASSERT_EQ(custom.exit_code, 0) << custom.err;
  std::istringstream custom_ids(custom.out);
  int id = 0;
  while (custom_ids >> id) EXPECT_NE(id, 98) << custom.out;
  RunResult beyond = run_in(dir, base + " --prompt-ids \"256 300\"");
  EXPECT_EQ(beyond.exit_code, 2);
  EXPECT_EQ(beyond.err, "shardrl: --prompt-ids: id 1 (\"300\") is outside the model's vocabulary (model.vocab_size = "
                        "259)\n");
  RunResult word = run_in(dir, base + " --prompt-ids \"256 x\"");
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_EQ(word.err, "shardrl: --prompt-ids: id 1 (\"x\") is not a non-negative integer\n");
  RunResult both = run_in(dir, base + " --prompt a --prompt-ids 1");
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

// ---- Checkpoints, seen from the command line --------------------------------------------------

// A small RL job that checkpoints: 2 ranks, the tiny model, 4 prompts x 4 samples.
const char* kCheckpointJob =
    "[run]\nname = \"ck\"\n[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n"
    "[rl]\nprompts_per_iteration = 4\nsamples_per_prompt = 4\nsft_steps = 2\nkl_coef = 0.1\n";

std::vector<std::int64_t> metric_iterations(const fs::path& file) {
  std::vector<std::int64_t> its;
  std::istringstream in(slurp(file));
  for (std::string line; std::getline(in, line);) its.push_back(std::stoll(line.substr(line.find(':') + 1)));
  return its;
}

// SIGUSR1 (Slurm's warning before the time limit) reaches every rank: the job
// finishes its iteration, saves, exits 3; the same command continues where it stopped, and the
// metrics hold every iteration once. `inspect` describes the checkpoint and verifies it.
TEST(Cli, SignalSavesAndTheSameCommandContinues) {
  fs::path dir = test_dir();
  // Its own config name, so that the signal reaches this test's ranks only.
  write(dir / "signalled.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 0\n");
  write(dir / "job.toml", kCheckpointJob);
  const std::string train = mpirun(2) + " train --config signalled.toml --set run.name=ck --set run.iterations=100000";
  // As Slurm does: the signal goes to every rank (whose command line starts with the binary).
  write(dir / "stop.sh", "set -u\n" + train + " > out1.txt 2>&1 &\npid=$!\n"
        "while [ \"$(cat runs/ck/metrics.jsonl 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.05; done\n"
        "pkill -USR1 -f '^[^ ]*shardrl train --config signalled.toml'\nwait $pid\necho $? > rc1.txt\n");
  RunResult stop = run_in(dir, "bash stop.sh");
  ASSERT_EQ(slurp(dir / "rc1.txt"), "3\n") << slurp(dir / "out1.txt");
  const std::string out1 = slurp(dir / "out1.txt");
  EXPECT_NE(out1.find("(stop requested by a signal)"), std::string::npos) << out1;
  const std::vector<std::int64_t> first = metric_iterations(dir / "runs" / "ck" / "metrics.jsonl");
  ASSERT_GE(first.size(), 3u);
  const std::string latest = slurp(dir / "runs" / "ck" / "checkpoints" / "latest");
  char expected[32];
  std::snprintf(expected, sizeof expected, "iter_%08zu.h5", first.size());
  EXPECT_EQ(latest.substr(0, latest.find('\n')), expected);

  RunResult inspect = run_in(dir, shardrl() + " inspect runs/ck/checkpoints/" + std::string(expected) + " --verify");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("written by shardrl"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("on 2 ranks"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("/model/model.layers.0.self_attn.q_proj.weight"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("float32 [64, 64]"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("/reference/model.norm.weight"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("checksums: all 100 tensors verified"), std::string::npos) << inspect.out;

  // The checkpoint's policy samples, with the checkpoint's own config: the same lines twice.
  const std::string gen = shardrl() + " generate --checkpoint runs/ck/checkpoints/" + std::string(expected) +
                          " --prompt 'sort: 3 1' --n 3 --max-new-tokens 6";
  RunResult g1 = run_in(dir, gen), g2 = run_in(dir, gen);
  ASSERT_EQ(g1.exit_code, 0) << g1.err;
  EXPECT_EQ(std::count(g1.out.begin(), g1.out.end(), '\n'), 3) << g1.out;
  EXPECT_EQ(g1.out, g2.out);

  const std::size_t total = first.size() + 4;
  RunResult more = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=" + std::to_string(total));
  ASSERT_EQ(more.exit_code, 0) << more.out << more.err;
  EXPECT_NE(more.out.find("resumed from runs/ck/checkpoints/" + std::string(expected)), std::string::npos) << more.out;
  EXPECT_EQ(more.out.find("warm-up 1/"), std::string::npos) << "the warm-up is not repeated";
  std::vector<std::int64_t> all = metric_iterations(dir / "runs" / "ck" / "metrics.jsonl");
  ASSERT_EQ(all.size(), total);
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<std::int64_t>(i));
}

// A checkpoint with one flipped byte in a tensor: resume and `inspect --verify` name the file
// and the tensor, and exit 2 on every rank; --no-resume starts afresh regardless.
TEST(Cli, CorruptCheckpointIsNamedAndRefused) {
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult first = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const fs::path file = dir / "runs" / "ck" / "checkpoints" / "iter_00000002.h5";
  ASSERT_TRUE(fs::exists(file));
  // Flip one byte inside the data of the embedding's first moment (where HDF5 put it).
  haddr_t at = HADDR_UNDEF;
  {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/optim/exp_avg/model.embed_tokens.weight", H5P_DEFAULT);
    at = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
  }
  ASSERT_NE(at, HADDR_UNDEF);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    char b = 0;
    f.seekg(static_cast<std::streamoff>(at + 1000));
    f.read(&b, 1);
    b = static_cast<char>(b ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(at + 1000));
    f.write(&b, 1);
  }
  RunResult resume = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=3");
  EXPECT_EQ(resume.exit_code, 2) << resume.out;
  EXPECT_NE(resume.err.find("shardrl: runs/ck/checkpoints/iter_00000002.h5: tensor /optim/exp_avg/model.embed_tokens.weight"),
            std::string::npos)
      << resume.err;
  EXPECT_NE(resume.err.find("checksum mismatch"), std::string::npos) << resume.err;
  RunResult verify = run_in(dir, shardrl() + " inspect " + file.string() + " --verify");
  EXPECT_EQ(verify.exit_code, 2);
  EXPECT_NE(verify.err.find("fail their checksum"), std::string::npos) << verify.err;
  RunResult fresh = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1 --no-resume");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  RunResult truncated = run_in(dir, "truncate -s 1000 " + file.string() + " && " + mpirun(2) +
                                        " train --config job.toml --resume-from " + file.string());
  EXPECT_EQ(truncated.exit_code, 2);
  EXPECT_NE(truncated.err.find(file.string() + ": cannot open as a shardrl checkpoint"), std::string::npos)
      << truncated.err;
}

// `convert` both ways and `model.init_from`: every /model tensor of a checkpoint under its Hugging Face name,
// bit for bit in fp32 and rounded once to bf16, with a config.json naming the architecture;
// a missing checkpoint is refused.
TEST(Cli, ConvertExportsAndInitFromImportsSafetensors) {
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult train = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const fs::path ckpt = dir / "runs" / "ck" / "checkpoints" / "iter_00000001.h5";
  for (const char* dtype : {"fp32", "bf16"}) {
    const fs::path out = dir / (std::string("hf_") + dtype);
    RunResult conv = run_in(dir, shardrl() + " convert --from " + ckpt.string() + " --to-safetensors " + out.string() +
                                     " --dtype " + dtype);
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const std::string config = slurp(out / "config.json");
    EXPECT_NE(config.find("\"model_type\": \"qwen3\""), std::string::npos) << config;
    EXPECT_NE(config.find("\"rms_norm_eps\": 1e-06"), std::string::npos) << config;
    shardrl::SafetensorsFile st(out / "model.safetensors");
    hid_t f = H5Fopen(ckpt.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    int compared = 0;
    for (const shardrl::StTensor& t : st.header().tensors) {
      hid_t d = H5Dopen2(f, ("/model/" + t.name).c_str(), H5P_DEFAULT);
      ASSERT_GE(d, 0) << t.name;
      std::vector<float> want(static_cast<std::size_t>(t.numel()));
      ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, want.data()), 0);
      H5Dclose(d);
      const std::vector<float> got = st.read_f32(t.name);
      ASSERT_EQ(got.size(), want.size()) << t.name;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const float expect = std::string(dtype) == "fp32" ? want[i] : static_cast<float>(shardrl::bf16(want[i]));
        ASSERT_EQ(got[i], expect) << dtype << " " << t.name << "[" << i << "]";
      }
      ++compared;
    }
    H5Fclose(f);
    EXPECT_EQ(compared, 25) << "every parameter of the tiny model";
  }
  // The fp32 export imported into a fresh job of no iterations (model.init_from, 2 ranks, each
  // reading its slices) is the checkpoint's /model again, bit for bit.
  RunResult import = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=imported --set run.iterations=0 "
                                             "--set rl.sft_steps=0 --set model.init_from=" + (dir / "hf_fp32").string());
  ASSERT_EQ(import.exit_code, 0) << import.err;
  const fs::path again = dir / "runs" / "imported" / "checkpoints" / "iter_00000000.h5";
  ASSERT_TRUE(fs::exists(again)) << import.out;
  // And through `convert --from-safetensors --to` (2 ranks, a checkpoint at iteration 0).
  const fs::path converted = dir / "converted.h5";
  RunResult back = run_in(dir, mpirun(2) + " convert --from-safetensors " + (dir / "hf_fp32").string() + " --to " +
                                   converted.string());
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_FALSE(fs::exists(converted.string() + ".convert.d"));
  for (const fs::path& copy : {again, converted}) {
    hid_t a = H5Fopen(ckpt.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), b = H5Fopen(copy.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(b, 0) << copy;
    shardrl::SafetensorsFile st(dir / "hf_fp32" / "model.safetensors");
    for (const shardrl::StTensor& t : st.header().tensors) {
      std::vector<float> x(static_cast<std::size_t>(t.numel())), y(x.size());
      for (auto [f, v] : {std::pair{a, &x}, std::pair{b, &y}}) {
        hid_t d = H5Dopen2(f, ("/model/" + t.name).c_str(), H5P_DEFAULT);
        ASSERT_GE(d, 0) << t.name;
        ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->data()), 0);
        H5Dclose(d);
      }
      EXPECT_EQ(x, y) << copy << ": " << t.name;
    }
    H5Fclose(a);
    H5Fclose(b);
  }
  RunResult neither = run_in(dir, shardrl() + " convert --from " + ckpt.string() + " --to x.h5");
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_NE(neither.err.find("convert takes --from CKPT.h5 --to-safetensors DIR"), std::string::npos) << neither.err;
  // And exported again: safetensors -> shardrl -> safetensors gives the same tensor bytes.
  RunResult reexport = run_in(dir, shardrl() + " convert --from " + again.string() + " --to-safetensors " +
                                       (dir / "hf_again").string() + " --dtype fp32");
  ASSERT_EQ(reexport.exit_code, 0) << reexport.err;
  {
    shardrl::SafetensorsFile first(dir / "hf_fp32" / "model.safetensors"), second(dir / "hf_again" / "model.safetensors");
    ASSERT_EQ(first.header().tensors.size(), second.header().tensors.size());
    for (const shardrl::StTensor& t : first.header().tensors)
      EXPECT_EQ(second.read_bytes(t.name), first.read_bytes(t.name)) << t.name;
  }
  // A directory of another shape is refused, naming the difference.
  RunResult other = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=other --set model.preset=custom "
                                            "--set model.d_ff=96 --set model.init_from=" + (dir / "hf_fp32").string());
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err.find("config.json: describes another model than the job's: d_ff (intermediate_size) is 128 "
                           "there and 96 in the job's [model]"),
            std::string::npos)
      << other.err;
  RunResult missing = run_in(dir, shardrl() + " convert --from nothing.h5 --to-safetensors x");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nothing.h5"), std::string::npos) << missing.err;
}

// SIGKILL at seeded random moments while the job saves (a pause between tensors makes saving
// most of the run): every time, each committed checkpoint verifies and the next start resumes
// from a complete one.
TEST(Cli, KilledWhileSavingAlwaysResumes) {
  fs::path dir = test_dir();
  // Its own config name: pkill must not match the jobs of tests running beside this one.
  write(dir / "killed.toml", std::string(kCheckpointJob) +
                                 "[checkpoint]\ninterval = 1\nkeep_last = 2\n[debug]\nsave_pause_ms = 5\n");
  // Kills land between the end of start-up and a few seconds of saving after it: start-up is
  // timed here with a whole one-iteration job (elsewhere), since it varies with the machine and
  // its load (MPI, CUDA and NCCL initialisation on a GPU machine shared by other tests).
  fs::create_directories(dir / "timing");
  fs::copy_file(dir / "killed.toml", dir / "timing" / "killed.toml");
  const RunResult timing = run_in(dir / "timing", mpirun(2) + " train --config killed.toml --set run.iterations=1");
  ASSERT_EQ(timing.exit_code, 0) << timing.err;
  const int start_ms = std::max(1200, static_cast<int>(1000 * timing.seconds));
  std::mt19937 rng(20261121);
  std::uniform_int_distribution<int> delay_ms(start_ms, start_ms + 2800);
  const fs::path ckpt = dir / "runs" / "ck" / "checkpoints";
  int resumed = 0, inside_a_save = 0;
  for (int round = 0; round < 10; ++round) {
    const int ms = delay_ms(rng);
    write(dir / "round.sh", mpirun(2) + " train --config killed.toml --set run.iterations=100000 > out.txt 2>&1 &\n"
                            "sleep " + std::to_string(ms / 1000.0) + "\npkill -KILL -f 'train --config killed.toml'\n"
                            "wait\ngrep -c 'resumed from' out.txt\ntrue\n");
    RunResult kill = run_in(dir, "bash round.sh");
    resumed += std::atoi(kill.out.c_str());
    if (fs::exists(ckpt))
      for (const auto& f : fs::directory_iterator(ckpt))
        if (f.path().extension() == ".partial") ++inside_a_save;
    // Every file under a final name is complete; `latest`, when there is one, names one of them.
    if (!fs::exists(ckpt)) continue;   // killed before the first save began
    for (const auto& f : fs::directory_iterator(ckpt))
      if (f.path().extension() == ".h5") {
        RunResult verify = run_in(dir, shardrl() + " inspect " + f.path().string() + " --verify");
        EXPECT_EQ(verify.exit_code, 0) << "round " << round << " (" << ms << " ms): " << verify.err;
      }
    if (fs::exists(ckpt / "latest")) {
      const std::string latest = slurp(ckpt / "latest");
      EXPECT_TRUE(fs::exists(ckpt / latest.substr(0, latest.find('\n')))) << "round " << round;
    }
  }
  EXPECT_GE(resumed, 5) << "most rounds should have started from an earlier round's checkpoint";
  EXPECT_GE(inside_a_save, 4) << "most kills should land inside a save (a .partial left behind)";
  ASSERT_TRUE(fs::exists(ckpt / "latest"));
  const std::string latest = slurp(ckpt / "latest");
  const std::int64_t done = std::stoll(latest.substr(5, 8));
  RunResult finish = run_in(dir, mpirun(2) + " train --config killed.toml --set debug.save_pause_ms=0 --set run.iterations=" +
                                     std::to_string(done + 1));
  EXPECT_EQ(finish.exit_code, 0) << finish.out << finish.err;
  EXPECT_NE(finish.out.find("resumed from runs/ck/checkpoints/" + latest.substr(0, latest.find('\n'))), std::string::npos)
      << finish.out;
}

// A fatal error on one rank aborts the whole job, fast, naming rank, host and cause.
TEST(Cli, FailingRankStopsWholeJobWithin30Seconds) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 100000000\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set debug.fail_rank=1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("shardrl: fatal error on rank 1 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("injected failure (debug.fail_rank = 1) at iteration 0"), std::string::npos) << r.err;
}

// A rank that stops taking part (alive, stuck) makes its peers abort after comm.timeout_s.
TEST(Cli, HangingRankIsDetectedByTimeout) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 100000000\n[comm]\ntimeout_s = 3\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set debug.fail_rank=1 --set debug.fail_mode=hang");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("shardrl: fatal error on rank 0 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not complete within comm.timeout_s = 3 s"), std::string::npos) << r.err;
}

}  // namespace
