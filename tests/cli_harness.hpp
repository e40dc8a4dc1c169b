// The harness of the end-to-end tests (test_cli*.cpp): the shardrl executable run as users run
// it, in a fresh directory per test (kept when the test fails), under a hard time limit.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#if defined(SHARDRL_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace cli_test {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Directories of the running test; removed when it passes, kept (for inspection) when it fails.
inline std::vector<fs::path>& test_dirs() {
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
inline const bool kListenerInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RemoveDirsOfPassedTests);
  return true;
}();

// A fresh directory per test, so ctest may run tests in parallel.
inline fs::path test_dir() {
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
inline RunResult run_in(const fs::path& dir, const std::string& args) {
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

// The iterations of a run's metrics.jsonl, record by record (each record starts with it).
inline std::vector<std::int64_t> metric_iterations(const fs::path& file) {
  std::vector<std::int64_t> its;
  std::istringstream in(slurp(file));
  for (std::string line; std::getline(in, line);) its.push_back(std::stoll(line.substr(line.find(':') + 1)));
  return its;
}

inline std::string shardrl_binary() { return SHARDRL_BINARY; }
// The launcher as CI runs it: as root, on a small machine, over shared memory.
inline std::string launcher() {
  return "env OPENBLAS_NUM_THREADS=1 " + std::string(SHARDRL_MPIEXEC) +
         " --oversubscribe --allow-run-as-root --mca btl self,vader --mca btl_vader_single_copy_mechanism none";
}
// Why a job of `ranks` ranks cannot run here, or "" when it can: a GPU build runs a rank per GPU
// (the job refuses two ranks that see the same GPU), so a test whose job runs more ranks than
// the machine has GPUs skips, saying so, instead of failing on that refusal.
inline std::string ranks_unavailable([[maybe_unused]] int ranks) {
#if defined(SHARDRL_ENABLE_CUDA)
  static const int gpus = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  if (gpus < ranks)
    return "its job runs " + std::to_string(ranks) + " ranks, and a GPU build needs a GPU per rank: this machine has " +
           std::to_string(gpus);
#endif
  return {};
}
#define SKIP_WITHOUT_A_GPU_PER_RANK(ranks) \
  if (const std::string why = cli_test::ranks_unavailable(ranks); !why.empty()) GTEST_SKIP() << why

inline std::string mpirun(int np) { return launcher() + " -np " + std::to_string(np) + " " + shardrl_binary(); }
// `shardrl ARGS` on two ranks started in different working directories, rank 0 in `first` and
// rank 1 in `second`: a relative path that one rank can read and the other cannot.
inline std::string mpirun_in_two_dirs(const fs::path& first, const fs::path& second, const std::string& args) {
  return launcher() + " -np 1 -wdir " + first.string() + " " + shardrl_binary() + args + " : -np 1 -wdir " +
         second.string() + " " + shardrl_binary() + args;
}

inline void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A small RL job that checkpoints: 2 ranks, the tiny model, 4 prompts x 4 samples.
inline const char* const kCheckpointJob =
    "[run]\nname = \"ck\"\n[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n"
    "[rl]\nprompts_per_iteration = 4\nsamples_per_prompt = 4\nsft_steps = 2\nkl_coef = 0.1\n";

}  // namespace cli_test
