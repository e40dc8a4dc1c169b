// `shardrl plan`: the job's memory per rank for a number of ranks and a GPU size, from the
// command line, without allocating (the plan itself is checked against real jobs' ledgers in
// test_memory_plan.cpp).
#include <cmath>

#include "app/plan_command.hpp"
#include "cli_harness.hpp"
#include "core/error.hpp"

namespace {

using namespace cli_test;

// The quickstart fits 2 ranks of this host; a 1.2 B-parameter model's full fine-tuning on one
// 8 GiB GPU does not (18 bytes per parameter), on one 80 GiB GPU it does, and on 8 ranks the
// sharded state is an eighth; with LoRA a 12 GiB GPU suffices. The plan names its parts and the
// keys that size them; a bad size or key is refused.
TEST(Cli, PlanSaysWhetherAJobFits) {
  fs::path dir = test_dir();
  const std::string config = std::string(SHARDRL_SOURCE_DIR) + "/configs/quickstart.toml";
  RunResult quick = run_in(dir, shardrl_binary() + " plan --config " + config + " --ranks 2");
  EXPECT_EQ(quick.exit_code, 0) << quick.out << quick.err;
  for (const char* part : {"sharded state and buffers outside the arena", "train phase", "rollout phase",
                           "(the larger phase: the arena's size)", "KV cache: ", "host memory (the batches)", "\nfits\n"})
    EXPECT_NE(quick.out.find(part), std::string::npos) << part << " in\n" << quick.out;

  const std::string llama = shardrl_binary() + " plan --config " + config + " --set model.preset=llama-1b ";
  RunResult small = run_in(dir, llama + "--ranks 1 --gpu-memory 8GiB");
  EXPECT_EQ(small.exit_code, 1) << small.out << small.err;
  EXPECT_NE(small.out.find("does not fit: the job does not fit in memory: its memory plan needs at least"),
            std::string::npos)
      << small.out;
  EXPECT_NE(small.out.find("weights, gradients and Adam moments: 1.236e+09 parameters / 1 ranks x 18 bytes"),
            std::string::npos)
      << small.out;
  RunResult large = run_in(dir, llama + "--ranks 1 --gpu-memory 80GiB");
  EXPECT_EQ(large.exit_code, 0) << large.out << large.err;
  RunResult eight = run_in(dir, llama + "--ranks 8 --gpu-memory 80GiB");
  EXPECT_EQ(eight.exit_code, 0) << eight.out << eight.err;
  EXPECT_NE(eight.out.find("1.236e+09 parameters / 8 ranks x 18 bytes"), std::string::npos) << eight.out;
  // LoRA: the base at 2 bytes, the adapters' state besides: on a 12 GiB GPU full fine-tuning
  // does not fit (20.7 GiB of state alone), LoRA does.
  EXPECT_EQ(run_in(dir, llama + "--ranks 1 --gpu-memory 12GiB").exit_code, 1);
  RunResult lora = run_in(dir, llama + "--ranks 1 --gpu-memory 12GiB --set lora.rank=16");
  EXPECT_EQ(lora.exit_code, 0) << lora.out << lora.err;
  EXPECT_NE(lora.out.find("frozen base (LoRA): 1.236e+09 parameters / 1 ranks x 2 bytes"), std::string::npos)
      << lora.out;

  // With --gpu-memory the config is a GPU build's whatever this build is: its CUDA graphs and
  // flash attention are not refused on a CPU login node.
  RunResult gpu_keys = run_in(dir, llama + "--ranks 8 --gpu-memory 80GiB --set rollout.cuda_graph=decode "
                                           "--set train.cuda_graph=full --set model.attention=flash");
  EXPECT_EQ(gpu_keys.exit_code, 0) << gpu_keys.out << gpu_keys.err;

  RunResult no_ranks = run_in(dir, llama + "--ranks 0");
  EXPECT_EQ(no_ranks.exit_code, 2);
  EXPECT_EQ(no_ranks.err.substr(0, no_ranks.err.find('\n')), "shardrl: --ranks: must be a whole number of at least 1, got 0");
  RunResult bad = run_in(dir, llama + "--gpu-memory 80XB");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "shardrl: --gpu-memory 80XB: a size such as 80GiB, 141GB or 512MiB\n");
  RunResult bad_key = run_in(dir, llama + "--set train.micro_batch_size=0");
  EXPECT_EQ(bad_key.exit_code, 2);
  EXPECT_NE(bad_key.err.find("train.micro_batch_size"), std::string::npos) << bad_key.err;
}

TEST(Cli, PlanReadsMemorySizes) {
  EXPECT_EQ(shardrl::parse_memory_size("80GiB", "--gpu-memory"), 80.0 * (1ull << 30));
  EXPECT_EQ(shardrl::parse_memory_size("141GB", "--gpu-memory"), 141e9);
  EXPECT_EQ(shardrl::parse_memory_size("512MiB", "--gpu-memory"), 512.0 * (1ull << 20));
  EXPECT_EQ(shardrl::parse_memory_size("1.5TB", "--host-memory"), 1.5e12);
  EXPECT_EQ(shardrl::parse_memory_size("24", "--host-memory"), 24.0 * (1ull << 30));
  EXPECT_THROW(shardrl::parse_memory_size("-1GiB", "--gpu-memory"), shardrl::InputError);
  EXPECT_THROW(shardrl::parse_memory_size("GiB", "--gpu-memory"), shardrl::InputError);
  // No memory is a typo, not a plan that does not fit (it planned, and said "does not fit", exit 1).
  EXPECT_THROW(shardrl::parse_memory_size("0", "--gpu-memory"), shardrl::InputError);
  EXPECT_THROW(shardrl::parse_memory_size("0.5MB", "--gpu-memory"), shardrl::InputError);
  // Beyond a double (it was an uncaught out_of_range: "unexpected error: stod", exit 1).
  EXPECT_THROW(shardrl::parse_memory_size(std::string(400, '9') + "GiB", "--gpu-memory"), shardrl::InputError);
  EXPECT_THROW(shardrl::parse_memory_size("2000000TiB", "--gpu-memory"), shardrl::InputError);
}

// Every shipped config states the hardware it is meant for as a `# plan:` line of `shardrl plan`
// arguments; the planner, run with them, finds that the job fits. A
// config whose model.init_from is a placeholder ("/path/to/NAME") is planned over
// tests/data/NAME/config.json, the real model's. A config without the line fails the test.
TEST(Cli, ShippedConfigsFitTheHardwareTheyState) {
  const fs::path root = SHARDRL_SOURCE_DIR, dir = test_dir();
  int planned = 0;
  for (const auto& entry : fs::directory_iterator(root / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string text = slurp(entry.path());
    const std::size_t at = text.find("\n#   plan: ");
    if (at == std::string::npos) {
      ADD_FAILURE() << entry.path() << " does not state its hardware (a '#   plan: <shardrl plan arguments>' line)";
      continue;
    }
    const std::size_t from = at + std::string("\n#   plan: ").size();
    std::string args = text.substr(from, text.find('\n', from) - from);
    const std::size_t placeholder = text.find("init_from = \"/path/to/");
    if (placeholder != std::string::npos) {
      const std::size_t name_at = placeholder + std::string("init_from = \"/path/to/").size();
      const fs::path model = root / "tests" / "data" / text.substr(name_at, text.find('"', name_at) - name_at);
      ASSERT_TRUE(fs::exists(model / "config.json")) << entry.path() << ": the test plans it over " << model;
      args += " --set model.init_from=" + model.string();
    }
    RunResult plan = run_in(dir, shardrl_binary() + " plan --config " + entry.path().string() + " " + args);
    EXPECT_EQ(plan.exit_code, 0) << entry.path() << " on its hardware (" << args << "):\n" << plan.out << plan.err;
    EXPECT_NE(plan.out.find("\nfits\n"), std::string::npos) << plan.out;
    ++planned;
  }
  EXPECT_GE(planned, 3);
}

}  // namespace
