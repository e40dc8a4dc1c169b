// End-to-end tests of the shardrl executable as users run it: malformed configurations give
// their exact message and exit code 2 on every rank; usage errors, help and version.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_harness.hpp"

namespace fs = std::filesystem;

namespace {

using namespace cli_test;

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
    {"key_outside_any_section", "seed = 3\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:1:8: 'seed' is outside any section; every key belongs to one (did you mean run.seed? put it under "
     "[run])\n"},
    {"unknown_key_outside_any_section", "bogus = 3\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:1:9: 'bogus' is outside any section; every key belongs to one\n"},
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
    {"completion_beyond_seq_len", "[rollout]\nmax_new_tokens = 2147483647\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:18: rollout.max_new_tokens = 2147483647 does not fit train.seq_len = 128 (a prompt of one token "
     "and the completion need train.seq_len >= rollout.max_new_tokens)\n"},
    {"completion_filling_the_model", "[train]\nseq_len = 256\n[rollout]\nmax_new_tokens = 256\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:4:18: rollout.max_new_tokens = 256 leaves no room for a prompt within the model's max_seq_len = "
     "256 (at most 255)\n"},
    {"vocabulary_below_the_byte_tokenizer", "[model]\npreset = \"custom\"\nvocab_size = 128\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:3:14: model.vocab_size = 128 is too small for rl.task = \"sort\", whose byte tokenizer uses ids "
     "up to 258 (model.vocab_size >= 259)\n"},
    {"integer_too_large", "[model]\npreset = \"custom\"\nvocab_size = 99999999999\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:3:14: model.vocab_size: must be <= 2147483647, got 99999999999\n"},
    {"set_without_value", "", "--set run.seed",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set run.seed: expected section.key=value (no value after run.seed: --set run.seed=VALUE)\n"},
    {"set_key_of_several_sections", "", "--set rl.top_k=5",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set rl.top_k=5: unknown key 'rl.top_k' (did you mean one of 'model.top_k', 'rollout.top_k'?)\n"},
    {"set_text_not_utf8", "", "--set run.dir=r\xff",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set run.dir=r\\xff: run.dir: is not valid UTF-8 text, which the saved config.toml must hold\n"},
    {"set_integer_out_of_range", "", "--set run.seed=99999999999999999999",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set run.seed=99999999999999999999: run.seed: 99999999999999999999 is out of range (a 64-bit integer)\n"},
    {"prompt_limit_without_room_for_a_completion",
     "[model]\ntokenizer = \"tok\"\n[rl]\ntask = \"text\"\ndataset = \"d.jsonl\"\nmax_prompt_tokens = 500\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:6:21: rl.max_prompt_tokens = 500 leaves no room for a completion of rollout.max_new_tokens = 64 "
     "within train.seq_len + 1 = 129 (model.max_seq_len 256): at most 65, or 0 for that\n"},
    {"set_real_beyond_double", "", "--set rl.kl_coef=1e-400",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set rl.kl_coef=1e-400: rl.kl_coef: 1e-400 is beyond a double's range\n"},
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
     "  bad.toml:3:15 and bad.toml:2:25: rl.minibatches = 4 does not divide rl.prompts_per_iteration = 10\n"},
    {"jsonl_without_dataset", "[rl]\ntask = \"jsonl\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: rl.task = \"jsonl\" needs rl.dataset (a JSONL file of examples)\n"},
    {"dataset_for_builtin_task", "", "--set rl.dataset=x.jsonl",
     "shardrl: invalid configuration (1 problem):\n"
     "  --set rl.dataset=x.jsonl: rl.dataset is read only by rl.task = \"jsonl\" or \"text\", not \"sort\"\n"},
    {"unknown_task", "[rl]\ntask = \"sotr\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: rl.task: must be one of \"sort\", \"add\", \"reverse\", \"jsonl\", \"text\", got \"sotr\"\n"},
    {"text_key_for_another_task", "[rl]\neval_interval = 5\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:17: rl.eval_interval applies to rl.task = \"text\", not \"sort\"\n"},
    {"text_without_tokenizer", "[rl]\ntask = \"text\"\ndataset = \"d.jsonl\"\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:8: rl.task = \"text\" needs the model's tokenizer: model.tokenizer or model.init_from (a "
     "directory with tokenizer.json)\n"},
    {"reward_timeout_beyond_the_peers_wait", "[model]\ntokenizer = \"tok\"\n[rl]\ntask = \"text\"\n"
     "dataset = \"d.jsonl\"\nreward = \"command\"\nreward_command = [\"judge\"]\nreward_timeout_s = 300\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:8:20: rl.reward_timeout_s = 300 must be shorter than comm.timeout_s = 300: the other ranks wait for "
     "a rank's scoring in a collective bounded by comm.timeout_s (raise comm.timeout_s for a slow reward command)\n"},
    {"reward_command_not_strings", "[rl]\nreward_command = [\"python3\", 3]\n", "",
     "shardrl: invalid configuration (1 problem):\n"
     "  bad.toml:2:18: rl.reward_command: expected an array of strings, got an array holding an integer\n"},
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, ExactMessageAndExitCode2) {
  const BadConfig& c = GetParam();
  fs::path dir = test_dir();
  write(dir / "bad.toml", c.toml);
  RunResult r = run_in(dir, shardrl_binary() + " train --config bad.toml " + c.extra_args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, c.expected_stderr);
  EXPECT_FALSE(fs::exists(dir / "runs")) << "nothing may be written for an invalid config";
}

INSTANTIATE_TEST_SUITE_P(Malformed, BadConfigTest, ::testing::ValuesIn(kBadConfigs),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Cli, MissingConfigFileNamesIt) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, shardrl_binary() + " train --config nowhere.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "shardrl: invalid configuration (1 problem):\n"
            "  cannot read config file 'nowhere.toml': No such file or directory\n");
}

// A directory as --config used to run the job with defaults, and a FIFO as the dataset blocked
// every rank forever: both are refused by name at once.
TEST(Cli, InputPathsMustBeRegularFiles) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  fs::create_directories(dir / "conf.d");
  write(dir / "conf.toml", "[run]\niterations = 1\n");
  RunResult config = run_in(dir, mpirun(2) + " train --config conf.d");
  EXPECT_EQ(config.exit_code, 2) << config.out;
  EXPECT_NE(config.err.find("cannot read config file 'conf.d': Is a directory"), std::string::npos) << config.err;
  write(dir / "job.toml", "[rl]\ntask = \"jsonl\"\ndataset = \"pipe.jsonl\"\n");
  RunResult fifo = run_in(dir, "mkfifo pipe.jsonl && " + mpirun(2) + " train --config job.toml");
  EXPECT_EQ(fifo.exit_code, 2) << fifo.out;
  EXPECT_NE(fifo.err.find("cannot read dataset 'pipe.jsonl': a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << fifo.err;
  EXPECT_LT(fifo.seconds, 60.0);
  // The run's checkpoint directory as a regular file ended in an uncaught filesystem_error.
  fs::create_directories(dir / "runs" / "f");
  write(dir / "runs" / "f" / "checkpoints", "");
  RunResult file = run_in(dir, mpirun(2) + " train --config conf.toml --set run.name=f");
  EXPECT_EQ(file.exit_code, 2) << file.out;
  EXPECT_NE(file.err.find("'runs/f/checkpoints' is not a directory: it is where the run's checkpoints go"),
            std::string::npos)
      << file.err;
}

TEST(Cli, UsageErrorsExit2) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, shardrl_binary() + " train");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shardrl: --config is required\nRun 'shardrl --help' for usage.\n");
  r = run_in(dir, shardrl_binary());
  EXPECT_EQ(r.exit_code, 2);
  // An empty value (an unset variable in a script) is refused, not read as the option left out
  // (--resume-from "" resumed the latest checkpoint), except where empty text is an input.
  for (const char* args : {" train --config job.toml --resume-from \"\"", " generate --config job.toml --temperature \"\"",
                           " report \"\""}) {
    r = run_in(dir, shardrl_binary() + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.err.find(": an empty value (an unset variable?)"), std::string::npos) << args << ": " << r.err;
  }
  r = run_in(dir, shardrl_binary() + " score --reward exact --answer 1 --completion \"\"");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "reward: 0\n");
}

TEST(Cli, HelpAndVersion) {
  fs::path dir = test_dir();
  RunResult r = run_in(dir, shardrl_binary() + " --version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("shardrl ", 0), 0u) << r.out;
  r = run_in(dir, shardrl_binary() + " train --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--set"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--log-all-ranks"), std::string::npos) << r.out;
}

// At np 2 every rank reaches the same verdict: one message, exit code 2, no hang.
TEST(Cli, InvalidConfigStopsEveryRankWithOneMessage) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
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

}  // namespace
