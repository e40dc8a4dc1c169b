// End-to-end tests of the shardrl executable as users run it: a job trains and writes its
// resolved config; the quickstart raises the reward by RL (each estimator, and LoRA); its curves;
// the profile and start-up reports; a failing write on one rank stops every rank with its cause;
// a job that cannot fit is refused before it allocates.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_harness.hpp"

namespace fs = std::filesystem;

namespace {

using namespace cli_test;

// The warm-up losses of the progress lines ("warm-up i/n | loss x"), in order.
std::vector<double> warmup_losses(const std::string& out) {
  std::vector<double> losses;
  for (std::size_t pos = 0; (pos = out.find("| loss ", pos)) != std::string::npos; pos += 7)
    if (out.rfind("warm-up ", pos) != std::string::npos && out.rfind("warm-up ", pos) > out.rfind('\n', pos))
      losses.push_back(std::stod(out.substr(pos + 7)));
  return losses;
}

TEST(Cli, JobTrainsAndWritesResolvedConfig) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
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
  RunResult again = run_in(dir, shardrl_binary() + " train --config runs/smoke/config.toml --set run.name=again "
                                             "--set run.iterations=1");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  std::string rewritten = slurp(dir / "runs" / "again" / "config.toml");
  std::string expected = written;
  expected.replace(expected.find("name = \"smoke\""), 14, "name = \"again\"");
  expected.replace(expected.find("iterations = 3"), 14, "iterations = 1");
  EXPECT_EQ(rewritten, expected);
}

// The main job, shortened: a short warm-up leaves the policy mostly wrong, then RL alone lifts
// the mean reward (fraction of exactly sorted lists) from below 0.3 to above 0.8 within 120
// iterations, with each advantage estimator (rl.advantage_estimator) on the same budget and
// learning rate (on the CPU machine each estimator's last 20 iterations averaged 0.85-0.88 at 120
// and at 150).
// Every iteration's reward_mean in a run's metrics.jsonl, in order.
std::vector<double> reward_means(const fs::path& file) {
  std::istringstream metrics(slurp(file));
  std::vector<double> reward;
  for (std::string line; std::getline(metrics, line);) {
    const auto at = line.find("\"reward_mean\":");
    if (at == std::string::npos) ADD_FAILURE() << file << ": no reward_mean in " << line;
    else reward.push_back(std::stod(line.substr(at + 14)));
  }
  return reward;
}

class ShortQuickstart : public ::testing::TestWithParam<std::string> {};

TEST_P(ShortQuickstart, RaisesTheRewardByRl) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  const std::string estimator = GetParam();
  fs::path dir = test_dir();
  std::string sets = " --set run.dir=runs --set rl.sft_steps=60 --set run.iterations=120 --set "
                     "'rl.advantage_estimator=\"" + estimator + "\"'";
  if (estimator == "dr_grpo") sets += " --set 'rl.loss_aggregation=\"constant\"'";
  RunResult r = run_in(dir, mpirun(2) + " train --config " + std::string(SHARDRL_SOURCE_DIR) +
                                "/configs/quickstart.toml" + sets);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<double> reward = reward_means(dir / "runs" / "quickstart" / "metrics.jsonl");
  ASSERT_EQ(reward.size(), 120u);
  double last = 0;
  for (std::size_t i = reward.size() - 20; i < reward.size(); ++i) last += reward[i] / 20;
  EXPECT_LT(reward.front(), 0.3);
  EXPECT_GT(last, 0.8) << "mean reward of the last 20 iterations";
}

INSTANTIATE_TEST_SUITE_P(Cli, ShortQuickstart,
                         ::testing::Values("grpo", "dr_grpo", "rloo", "reinforce_plus_plus"),
                         [](const ::testing::TestParamInfo<std::string>& estimator) { return estimator.param; });

// LoRA learns the quickstart's task on 2 ranks: rank 8 on every linear layer of the tiny model,
// its base frozen. The base is random (Cli.LoraOverAPretrainedBase trains over an imported one),
// drawn with model.init_std = 0.5: at the default 0.02 a frozen random head under a frozen final
// norm bounds every logit near zero, and no adapter lifts the warm-up's loss below ~4.3. Adapters
// learn faster than full weights, as with PEFT: the warm-up and RL rates are raised. 120
// iterations, not the quickstart's 200: the last 20 averaged 0.94 at 120 and 0.93 at 200.
TEST(Cli, LoraQuickstartReachesTheTargetReward) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  RunResult r = run_in(dir, mpirun(2) + " train --config " + std::string(SHARDRL_SOURCE_DIR) +
                                "/configs/quickstart.toml --set run.dir=runs --set lora.rank=8 --set model.init_std=0.5 "
                                "--set rl.sft_lr=1e-2 --set optim.lr=2e-3 --set run.iterations=120");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("lora.rank                           8"), std::string::npos) << r.out;
  const std::vector<double> reward = reward_means(dir / "runs" / "quickstart" / "metrics.jsonl");
  ASSERT_EQ(reward.size(), 120u);
  double last = 0;
  for (std::size_t i = reward.size() - 20; i < reward.size(); ++i) last += reward[i] / 20;
  EXPECT_GT(last, 0.9) << "mean reward of the last 20 iterations";
  EXPECT_GT(last, reward.front()) << "RL raised the reward over the warm-up's";
}

// The quickstart's curves drawn as many people run a .py file, `python3 scripts/plot_metrics.py`,
// when the python3 first on PATH has no matplotlib (pyenv, conda, a virtualenv; here a shim without
// site-packages): the script runs itself again with Debian's python3 and the PNG exists.
TEST(Cli, QuickstartCurvesDrawUnderAPython3WithoutMatplotlib) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no matplotlib (apt-get install python3-matplotlib)";
  fs::path dir = test_dir();
  RunResult train = run_in(dir, mpirun(2) + " train --config " + std::string(SHARDRL_SOURCE_DIR) +
                                    "/configs/quickstart.toml --set run.dir=runs --set rl.sft_steps=5 "
                                    "--set run.iterations=4");
  ASSERT_EQ(train.exit_code, 0) << train.out << train.err;
  fs::create_directories(dir / "bin");
  write(dir / "bin" / "python3", "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n");
  fs::permissions(dir / "bin" / "python3", fs::perms::owner_all);
  const std::string shim_path = "env PATH=\"" + (dir / "bin").string() + ":$PATH\" ";
  ASSERT_EQ(run_in(dir, shim_path + "python3 -c 'import json'").exit_code, 0) << "the shim does not run";
  ASSERT_NE(run_in(dir, shim_path + "python3 -c 'import matplotlib'").exit_code, 0)
      << "the shim imports matplotlib: the test would prove nothing";
  RunResult plot =
      run_in(dir, shim_path + "python3 " + std::string(SHARDRL_SOURCE_DIR) + "/scripts/plot_metrics.py runs/quickstart");
  ASSERT_EQ(plot.exit_code, 0) << plot.err;
  EXPECT_EQ(plot.out, "runs/quickstart/metrics.png\n");
  EXPECT_GT(fs::file_size(dir / "runs" / "quickstart" / "metrics.png"), 1000u);
}

TEST(Cli, ProfilePrintsThePerStepBreakdown) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
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

// The binary reports the paths its built objects took (the job layer's build report), so a key
// that did not reach them shows: here the flipped weight-gradient path and state dtypes.
TEST(Cli, StartUpReportShowsThePathsTheBuildTook) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 0\n");
  RunResult plain = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_NE(plain.out.find("weight gradients         fused"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("main gradient dtype      fp32"), std::string::npos) << plain.out;
  RunResult flipped = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=flipped"
                                              " --set train.gradient_accumulation_fusion=false"
                                              " --set fsdp.main_grad_dtype='\"bf16\"' --set optim.state_dtype='\"bf16\"'");
  ASSERT_EQ(flipped.exit_code, 0) << flipped.out << flipped.err;
  EXPECT_NE(flipped.out.find("weight gradients         unfused"), std::string::npos) << flipped.out;
  EXPECT_NE(flipped.out.find("main gradient dtype      bf16"), std::string::npos) << flipped.out;
  EXPECT_NE(flipped.out.find("Adam moment dtype        bf16"), std::string::npos) << flipped.out;
}

// A section only rank 0 runs fails as a full disk would: the metrics record mid-run, or the commit
// of a checkpoint. Every rank stops within seconds with rank 0's message (not after the watchdog's
// comm.timeout_s, blaming a peer), exit 2, and the run keeps what was committed before.
TEST(Cli, RankZeroIoFailureStopsEveryRankWithItsCause) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 5\n[rl]\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n"
                          "[checkpoint]\ninterval = 1\n[comm]\ntimeout_s = 20\n");
  RunResult metrics = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=m --set debug.fail_io='\"metrics\"'"
                                              " --set debug.fail_io_iteration=3");
  EXPECT_EQ(metrics.exit_code, 2) << metrics.out << metrics.err;
  EXPECT_LT(metrics.seconds, 60.0);
  EXPECT_NE(metrics.err.find("metrics.jsonl': No space left on device (injected"), std::string::npos) << metrics.err;
  EXPECT_EQ(metrics.err.find(" within comm.timeout_s"), std::string::npos) << "the watchdog fired: " << metrics.err;
  EXPECT_TRUE(fs::exists(dir / "runs" / "m" / "checkpoints" / "iter_00000002.h5"));
  RunResult commit = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=c --set debug.fail_io='\"commit\"'"
                                             " --set debug.fail_io_iteration=2");
  EXPECT_EQ(commit.exit_code, 2) << commit.out << commit.err;
  EXPECT_LT(commit.seconds, 60.0);
  EXPECT_NE(commit.err.find("iter_00000002.h5.partial': No space left on device (injected"), std::string::npos)
      << commit.err;
  EXPECT_EQ(commit.err.find(" within comm.timeout_s"), std::string::npos) << "the watchdog fired: " << commit.err;
  EXPECT_TRUE(fs::exists(dir / "runs" / "c" / "checkpoints" / "iter_00000001.h5"));
  EXPECT_FALSE(fs::exists(dir / "runs" / "c" / "checkpoints" / "iter_00000002.h5"));
  // The same command without the fault resumes from the last committed checkpoint.
  RunResult resumed = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=c");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from runs/c/checkpoints/iter_00000001.h5"), std::string::npos) << resumed.out;
}

// The learning-rate schedule's warm-up and decay are RL's: the supervised warm-up's steps spent
// none of it (with 6 warm-up steps RL began at the cosine's floor, 0.1 x optim.lr).
TEST(Cli, RlStartsItsOwnLearningRateScheduleAfterTheWarmUp) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 2\n[optim]\nlr = 5e-4\nschedule = \"cosine\"\nwarmup_steps = 4\n"
                          "decay_steps = 4\n[rl]\nsft_steps = 6\nsft_lr = 3e-3\nminibatches = 2\n"
                          "prompts_per_iteration = 2\nsamples_per_prompt = 2\n");
  RunResult r = run_in(dir, mpirun(1) + " train --config job.toml");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Two steps an iteration: RL's steps 2 and 4 of its warm-up of 4.
  const std::string metrics = slurp(dir / "runs" / "shardrl" / "metrics.jsonl");
  const std::size_t first = metrics.find("\"lr\":"), second = metrics.find("\"lr\":", first + 1);
  ASSERT_NE(second, std::string::npos) << metrics;
  EXPECT_NEAR(std::stod(metrics.substr(first + 5)), 2.5e-4, 1e-9) << metrics;
  EXPECT_NEAR(std::stod(metrics.substr(second + 5)), 5e-4, 1e-9) << metrics;
  // Resumed, the schedule goes on from where RL's began (the checkpoint keeps that step): RL's
  // step 6, halfway down the cosine, 5e-4 x (0.1 + 0.9 x 0.5).
  RunResult more = run_in(dir, mpirun(1) + " train --config job.toml --set run.iterations=3");
  ASSERT_EQ(more.exit_code, 0) << more.out << more.err;
  const std::string resumed = slurp(dir / "runs" / "shardrl" / "metrics.jsonl");
  const std::size_t third = resumed.rfind("\"lr\":");
  EXPECT_NEAR(std::stod(resumed.substr(third + 5)), 2.75e-4, 1e-9) << resumed;
}

// A background save (checkpoint.async) whose commit fails: the next save writes the newer state
// in the foreground (it exited 2 there, losing what the job did since its last committed
// checkpoint, a stop's save included), and only a failure of that one stops the job.
TEST(Cli, AFailedBackgroundSaveIsFollowedByAForegroundSaveOfTheNewerState) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 4\n[rl]\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n"
                          "[checkpoint]\ninterval = 1\nasync = true\n[comm]\ntimeout_s = 20\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set debug.fail_io='\"commit\"'"
                                        " --set debug.fail_io_iteration=2");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string all = r.out + r.err;
  EXPECT_NE(all.find("the background checkpoint save failed"), std::string::npos) << all;
  EXPECT_NE(all.find("iter_00000003.h5 (in the foreground after the background save failed)"),
            std::string::npos)
      << all;
  const fs::path ckpt = dir / "runs" / "shardrl" / "checkpoints";
  EXPECT_FALSE(fs::exists(ckpt / "iter_00000002.h5"));
  for (const char* kept : {"iter_00000001.h5", "iter_00000003.h5", "iter_00000004.h5"})
    EXPECT_TRUE(fs::exists(ckpt / kept)) << kept;
}

// A full disk while the ranks write a checkpoint's tensors, on one rank only (the last, its first
// tensor; the others enter HDF5's collective write): the job stops at once with that rank's
// message naming the file and tensor (exit 1), not after the watchdog's comm.timeout_s, and not
// by crashing in HDF5 at exit; the checkpoints committed before stay, and the same command without
// the fault resumes from the last of them.
TEST(Cli, TensorWriteFailureStopsEveryRankAtOnce) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 4\n[rl]\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n"
                          "[checkpoint]\ninterval = 1\n[comm]\ntimeout_s = 20\n");
  RunResult failed = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=w --set debug.fail_io='\"write\"'"
                                             " --set debug.fail_io_iteration=2");
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  EXPECT_LT(failed.seconds, 60.0);
  EXPECT_NE(failed.err.find("fatal error on rank 1"), std::string::npos) << failed.err;
  EXPECT_NE(failed.err.find("iter_00000002.h5.partial: cannot write tensor "), std::string::npos) << failed.err;
  EXPECT_NE(failed.err.find("No space left on device (injected: debug.fail_io = \"write\")"), std::string::npos)
      << failed.err;
  EXPECT_EQ(failed.err.find(" within comm.timeout_s"), std::string::npos) << "the watchdog fired: " << failed.err;
  EXPECT_EQ(failed.err.find("Segmentation fault"), std::string::npos) << failed.err;
  const fs::path checkpoints = dir / "runs" / "w" / "checkpoints";
  EXPECT_TRUE(fs::exists(checkpoints / "iter_00000001.h5"));
  EXPECT_FALSE(fs::exists(checkpoints / "iter_00000002.h5"));
  RunResult resumed = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=w");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from runs/w/checkpoints/iter_00000001.h5"), std::string::npos) << resumed.out;
}

// A shape or batch beyond any machine's memory (2^31 - 1 of a key) ended in std::bad_alloc
// (SIGABRT), allocated host memory without bound, or built a batch for minutes. The memory plan
// (job/memory_plan.hpp) refuses each before allocating: exit 2 on every rank, the plan's numbers,
// the key behind the largest part, and nothing of the run written.
TEST(Cli, AJobThatCannotFitIsRefusedBeforeAllocating) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  struct Probe {
    std::string sets, key;
  };
  const std::string custom = " --set model.preset='\"custom\"'";
  const std::vector<Probe> probes{
      {custom + " --set model.vocab_size=2147483647", "vocab_size"},
      {custom + " --set model.n_layers=2147483647", "layers"},
      {custom + " --set model.n_experts=2147483647 --set model.top_k=1", "parameters"},
      {" --set train.micro_batch_size=2147483647", "train.micro_batch_size"},
      {" --set rl.prompts_per_iteration=2147483647 --set rl.minibatches=1", "rl.prompts_per_iteration"},
      {" --set rl.samples_per_prompt=2147483647", "rl.samples_per_prompt"},
  };
  // (rl.sft_batch_size = 2^31 - 1 needs at least 64 GiB of host memory per rank: refused on a
  // small machine, as MemoryPlan.RefusalNamesTheNumbersAndTheKeys checks, but it fits a large
  // host, where the watchdog bounds each of its long warm-up steps by comm.timeout_s.)
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 1\n[rl]\nsft_steps = 1\n");
  for (const Probe& p : probes) {
    RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=big" + p.sets);
    EXPECT_EQ(r.exit_code, 2) << p.sets << "\n" << r.out << r.err;
    EXPECT_LT(r.seconds, 30.0) << p.sets;
    EXPECT_NE(r.err.find("the job does not fit in memory: its memory plan needs at least"), std::string::npos)
        << p.sets << "\n" << r.err;
    EXPECT_NE(r.err.find(p.key), std::string::npos) << p.sets << "\n" << r.err;
    EXPECT_EQ(r.err.find("fatal error"), std::string::npos) << p.sets << "\n" << r.err;
    EXPECT_FALSE(fs::exists(dir / "runs" / "big" / "config.toml")) << p.sets;
  }
}

}  // namespace
