// End-to-end checkpoint tests of the shardrl executable: a signal saves and the same command
// continues; a corrupt checkpoint is named and refused; a run is never overwritten; a job killed
// while saving always resumes. (`convert` and `init_from`: test_cli_convert.cpp; --resume-from
// another run's checkpoint and --requeued: test_cli_resume_from.cpp.)
#include <hdf5.h>

#include <csignal>
#include <functional>
#include <limits>
#include <cstdio>
#include <random>

#include "cli_harness.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/metrics_log.hpp"

namespace {

using namespace cli_test;

// ---- Checkpoints, seen from the command line --------------------------------------------------

// SIGUSR1 (Slurm's warning before the time limit) reaches every rank: the job
// finishes its iteration, saves, exits 3; the same command continues where it stopped, and the
// metrics hold every iteration once. `inspect` describes the checkpoint and verifies it.
TEST(Cli, SignalSavesAndTheSameCommandContinues) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
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

  RunResult inspect = run_in(dir, shardrl_binary() + " inspect runs/ck/checkpoints/" + std::string(expected) + " --verify");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("written by shardrl"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("on 2 ranks"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("/model/model.layers.0.self_attn.q_proj.weight"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("float32 [64, 64]"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("/reference/model.norm.weight"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("checksums: all 100 tensors verified"), std::string::npos) << inspect.out;

  // The checkpoint's policy samples, with the checkpoint's own config: the same lines twice.
  const std::string gen = shardrl_binary() + " generate --checkpoint runs/ck/checkpoints/" + std::string(expected) +
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

// A run stopped within its warm-up and resumed (allowed) with rl.sft_steps lowered to the steps it
// had done: its warm-up ends there, as a finished one does: the KL reference is the weights then
// and RL's learning-rate schedule starts then. (The reference stayed all zeros, so the first
// iteration's kl read 2.6 where it is about 0, and the schedule never started: RL's warm-up of
// the learning rate was skipped; found by review.) A resume that turns the KL term on over a run
// without it is refused, naming the key (it named a missing tensor).
TEST(Cli, AWarmUpCutShortOnResumeEndsThere) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "warm.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 0\n");
  const std::string train = " train --config warm.toml --set run.name=ck --set run.iterations=1";
  write(dir / "stop.sh", "set -u\n" + mpirun(2) + train + " --set rl.sft_steps=100000 > out1.txt 2>&1 &\npid=$!\n"
        "while ! grep -q 'warm-up 10/' out1.txt 2>/dev/null; do sleep 0.05; done\n"
        "pkill -USR1 -f '^[^ ]*shardrl train --config warm.toml'\nwait $pid\necho $? > rc1.txt\n");
  run_in(dir, "bash stop.sh");
  ASSERT_EQ(slurp(dir / "rc1.txt"), "3\n") << slurp(dir / "out1.txt");
  RunResult inspect = run_in(dir, shardrl_binary() + " inspect runs/ck/checkpoints/iter_00000000.h5");
  const std::string done_at = "warm-up steps done ";
  const std::size_t at = inspect.out.find(done_at);
  ASSERT_NE(at, std::string::npos) << inspect.out << inspect.err;
  const std::string steps = inspect.out.substr(at + done_at.size(), inspect.out.find(',', at) - at - done_at.size());
  ASSERT_GE(std::stoll(steps), 10) << inspect.out;
  RunResult resumed = run_in(dir, mpirun(2) + train + " --set rl.sft_steps=" + steps +
                                      " --set optim.warmup_steps=4 --allow-config-change");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(resumed.out.find("warm-up " + steps), std::string::npos) << "no warm-up step is redone";
  const auto records = shardrl::read_metrics(dir / "runs/ck/metrics.jsonl");
  ASSERT_EQ(records.size(), 1u);
  double kl = -1, lr = -1;
  for (const auto& [key, value] : records[0]) {
    if (key == "kl") kl = value;
    if (key == "lr") lr = value;
  }
  EXPECT_GE(kl, 0.0);
  EXPECT_LT(kl, 1e-4) << "the reference is the policy as RL began (all zeros, it read 0.018)";
  EXPECT_NEAR(lr, 3e-4 / 4, 1e-9) << "RL's first step is the first of its learning-rate warm-up (optim.lr 3e-4)";


  RunResult kl_on = run_in(dir, shardrl_binary() + " train --config warm.toml --set run.name=ck --set run.iterations=2 "
                                                   "--set rl.sft_steps=" + steps + " --set optim.warmup_steps=4 "
                                                   "--set rl.kl_coef=0 --allow-config-change");
  ASSERT_EQ(kl_on.exit_code, 0) << kl_on.out << kl_on.err;
  RunResult refused = run_in(dir, shardrl_binary() + " train --config warm.toml --set run.name=ck --set run.iterations=3 "
                                                     "--set rl.sft_steps=" + steps + " --set optim.warmup_steps=4 "
                                                     "--allow-config-change");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("iter_00000002.h5 is a run's without the KL term (rl.kl_coef = 0): it holds no reference "
                             "policy"),
            std::string::npos)
      << refused.err;
}

// A checkpoint with one flipped byte in a tensor: resume and `inspect --verify` name the file
// and the tensor, and exit 2 on every rank; --no-resume --overwrite starts afresh regardless.
TEST(Cli, CorruptCheckpointIsNamedAndRefused) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
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
  RunResult verify = run_in(dir, shardrl_binary() + " inspect " + file.string() + " --verify");
  EXPECT_EQ(verify.exit_code, 2);
  EXPECT_NE(verify.err.find("fail their checksum"), std::string::npos) << verify.err;
  RunResult fresh = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1 --no-resume --overwrite");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  RunResult truncated = run_in(dir, "truncate -s 1000 " + file.string() + " && " + mpirun(2) +
                                        " train --config job.toml --resume-from " + file.string());
  EXPECT_EQ(truncated.exit_code, 2);
  EXPECT_NE(truncated.err.find(file.string() + ": cannot open as a shardrl checkpoint"), std::string::npos)
      << truncated.err;
}

// A crash between committing a checkpoint and replacing `latest` leaves no `latest`: the job
// resumes from the newest committed file (never starts afresh over the run), and the metrics
// hold every iteration once. --no-resume on that run is refused (nothing is touched, config.toml
// included) unless
// --overwrite; an uncommitted `.partial` file is never loaded, named by --resume-from or by
// `latest`.
TEST(Cli, AnExistingRunIsNeverOverwritten) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 1\n");
  RunResult first = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const fs::path checkpoints = dir / "runs" / "ck" / "checkpoints";
  const fs::path second = checkpoints / "iter_00000002.h5";
  ASSERT_TRUE(fs::exists(second));
  const std::string second_bytes = slurp(second);
  fs::remove(checkpoints / "latest");

  RunResult resumed = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=3");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resuming from the newest committed checkpoint iter_00000002.h5"), std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from runs/ck/checkpoints/iter_00000002.h5"), std::string::npos) << resumed.out;
  EXPECT_EQ(slurp(second), second_bytes) << "the committed checkpoint was rewritten";
  std::vector<std::int64_t> its = metric_iterations(dir / "runs" / "ck" / "metrics.jsonl");
  ASSERT_EQ(its.size(), 3u);
  for (std::size_t i = 0; i < its.size(); ++i) EXPECT_EQ(its[i], static_cast<std::int64_t>(i));

  // `latest` decides (it may name an older checkpoint on purpose), but a newer committed file is
  // pointed out with the way to take it.
  write(checkpoints / "latest", "iter_00000002.h5\n");
  fs::create_symlink("nowhere.h5", checkpoints / "iter_00000009.h5");   // dangling: no checkpoint
  RunResult behind = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=3");
  ASSERT_EQ(behind.exit_code, 0) << behind.out << behind.err;
  EXPECT_NE(behind.out.find("resuming from iter_00000002.h5, which `latest` names, though the newer iter_00000003.h5 "
                            "exists"),
            std::string::npos)
      << behind.out;
  EXPECT_EQ(metric_iterations(dir / "runs" / "ck" / "metrics.jsonl").size(), 3u);
  fs::remove(checkpoints / "iter_00000009.h5");

  // --resume-from an earlier checkpoint of the run: the job would write its iter_00000003.h5 over
  // the committed one and drop that iteration's metrics. Refused, leaving everything as it was;
  // with --overwrite the later checkpoints are deleted first, by name.
  const fs::path third = checkpoints / "iter_00000003.h5";
  const std::string third_bytes = slurp(third), metrics_before = slurp(dir / "runs" / "ck" / "metrics.jsonl");
  const std::string config_before = slurp(dir / "runs" / "ck" / "config.toml");
  const std::string branch = " train --config job.toml --set run.iterations=3 --resume-from " + second.string();
  RunResult refused_branch = run_in(dir, mpirun(2) + branch);
  EXPECT_EQ(refused_branch.exit_code, 2) << refused_branch.out;
  EXPECT_NE(refused_branch.err.find("(iteration 2): the run directory runs/ck already holds 1 later checkpoint(s), "
                                    "the newest iter_00000003.h5"),
            std::string::npos)
      << refused_branch.err;
  EXPECT_EQ(slurp(third), third_bytes) << "a refused branch rewrote the later checkpoint";
  EXPECT_EQ(slurp(dir / "runs" / "ck" / "metrics.jsonl"), metrics_before) << "a refused branch touched the metrics";
  EXPECT_EQ(slurp(dir / "runs" / "ck" / "config.toml"), config_before) << "a refused branch rewrote config.toml";
  RunResult no_flag = run_in(dir, mpirun(2) + " train --config job.toml --overwrite");
  EXPECT_EQ(no_flag.exit_code, 2);
  EXPECT_NE(no_flag.err.find("--overwrite requires --no-resume or --resume-from"), std::string::npos) << no_flag.err;
  RunResult branched = run_in(dir, mpirun(2) + branch + " --overwrite");
  ASSERT_EQ(branched.exit_code, 0) << branched.out << branched.err;
  EXPECT_NE(branched.out.find("--overwrite: deleted 1 later checkpoint(s) of runs/ck (the newest iter_00000003.h5)"),
            std::string::npos)
      << branched.out;
  EXPECT_TRUE(fs::exists(third)) << "the branch's own third iteration";
  EXPECT_EQ(shardrl::latest_checkpoint(checkpoints).filename(), third.filename());
  EXPECT_EQ(metric_iterations(dir / "runs" / "ck" / "metrics.jsonl").size(), 3u);

  const std::string config_now = slurp(dir / "runs" / "ck" / "config.toml");

  RunResult refused = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1 --no-resume");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("--no-resume: the run directory runs/ck already holds"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--overwrite"), std::string::npos) << refused.err;
  EXPECT_TRUE(fs::exists(checkpoints / "iter_00000003.h5"));
  EXPECT_EQ(metric_iterations(dir / "runs" / "ck" / "metrics.jsonl").size(), 3u) << "the metrics were touched";
  EXPECT_EQ(slurp(dir / "runs" / "ck" / "config.toml"), config_now) << "a refused start rewrote config.toml";

  // A metrics log that does not parse stops the start before anything is trained or rewritten
  // (it was found only after the warm-up, with config.toml already rewritten).
  const fs::path metrics_file = dir / "runs" / "ck" / "metrics.jsonl";
  const std::string metrics_text = slurp(metrics_file);
  write(metrics_file, "not json\n" + metrics_text);
  RunResult bad_metrics = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=4 "
                                                  "--set checkpoint.keep_last=3");
  EXPECT_EQ(bad_metrics.exit_code, 2) << bad_metrics.out;
  EXPECT_NE(bad_metrics.err.find("metrics.jsonl:1"), std::string::npos) << bad_metrics.err;
  EXPECT_EQ(slurp(dir / "runs" / "ck" / "config.toml"), config_now) << "a refused start rewrote config.toml";
  EXPECT_FALSE(fs::exists(checkpoints / "iter_00000004.h5"));
  write(metrics_file, metrics_text);

  fs::copy_file(second, checkpoints / "iter_00000004.h5.partial");
  RunResult partial = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=5 --resume-from " +
                                      (checkpoints / "iter_00000004.h5.partial").string());
  EXPECT_EQ(partial.exit_code, 2) << partial.out;
  EXPECT_NE(partial.err.find("iter_00000004.h5.partial: an uncommitted checkpoint"), std::string::npos) << partial.err;
  write(checkpoints / "latest", "iter_00000004.h5.partial\n");
  RunResult pointed = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=5");
  EXPECT_EQ(pointed.exit_code, 2) << pointed.out;
  EXPECT_NE(pointed.err.find("an uncommitted checkpoint"), std::string::npos) << pointed.err;
  RunResult inspect = run_in(dir, shardrl_binary() + " inspect " + (checkpoints / "iter_00000004.h5.partial").string());
  EXPECT_EQ(inspect.exit_code, 2) << inspect.out;

  RunResult fresh = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1 --no-resume --overwrite");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.out << fresh.err;
  EXPECT_FALSE(fs::exists(second)) << "--overwrite deletes the old checkpoints";
  EXPECT_EQ(metric_iterations(dir / "runs" / "ck" / "metrics.jsonl").size(), 1u);
}

// A checkpoint's saved configuration is read as the job that saved it wrote it, not checked
// against the reader's world size: a checkpoint saved by 2 ranks with debug.fail_rank = 1 is
// inspected, verified and exported by one process.
TEST(Cli, SavedConfigsAreReadAsTheirJobWroteThem) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult saved = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=0 --set debug.fail_rank=1");
  ASSERT_EQ(saved.exit_code, 0) << saved.out << saved.err;
  const std::string file = (dir / "runs" / "ck" / "checkpoints" / "iter_00000000.h5").string();
  RunResult verify = run_in(dir, shardrl_binary() + " inspect " + file + " --verify");
  EXPECT_EQ(verify.exit_code, 0) << verify.err;
  RunResult exported = run_in(dir, shardrl_binary() + " convert --from " + file + " --to-safetensors hf");
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
}

// As slurm/README.md documents for `mpirun` launches: SIGUSR1 or SIGTERM sent to mpirun reaches
// the ranks, which save; mpirun exits 3 after SIGUSR1 and 1 after SIGTERM (Open MPI's choice).
// The GPU machines' Ubuntu Open MPI 4.1.6 was seen not to forward SIGUSR1, so there only SIGTERM.
// On SIGTERM, Open MPI 4.1's mpirun sends the ranks SIGCONT at once, SIGTERM 1 s later and
// SIGKILL 1 s after that, and stops forwarding their output. With a synchronous logger a rank
// that logged every step blocked writing its log and never reached the save (on an idle 2-core
// machine 4 of 5 runs saved nothing); the log's queue now drops the lines instead. So SIGTERM
// runs twice: with the ranks' output left to mpirun, where only the checkpoint tells (the ranks'
// last lines need not reach mpirun's output), and with each rank's output in a file of its own,
// where every rank's warning is found.
TEST(Cli, SignalsToMpirunReachTheRanks) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 0\n");
  struct Case {
    std::string signal;
    bool rank_files;   // each rank's output in rank<R>.txt, not through mpirun
  };
#ifdef SHARDRL_ENABLE_CUDA
  const std::vector<Case> cases{{"TERM", false}, {"TERM", true}};
#else
  const std::vector<Case> cases{{"USR1", false}, {"TERM", false}, {"TERM", true}};
#endif
  std::string launcher = mpirun(2);
  launcher.resize(launcher.size() - shardrl_binary().size());   // mpirun and its options
  for (const Case& c : cases) {
    const std::string name = "sig" + c.signal + (c.rank_files ? "_files" : "");
    const std::string train = " train --config job.toml --set run.name=" + name + " --set run.iterations=100000";
    const std::string job = c.rank_files ? launcher + "bash -c 'exec " + shardrl_binary() + train +
                                               " > rank$OMPI_COMM_WORLD_RANK.txt 2>&1'"
                                         : mpirun(2) + train;
    write(dir / "stop.sh", "set -u\n" + job + " > out.txt 2>&1 &\npid=$!\n"
                               "while [ \"$(cat runs/" + name + "/metrics.jsonl 2>/dev/null | wc -l)\" -lt 2 ]; do "
                               "sleep 0.05; done\nkill -" + c.signal + " $pid\nwait $pid\necho $? > rc.txt\n");
    run_in(dir, "bash stop.sh");
    const std::string out = c.rank_files ? slurp(dir / "rank0.txt") + slurp(dir / "rank1.txt") : slurp(dir / "out.txt");
    EXPECT_EQ(slurp(dir / "rc.txt"), c.signal == "USR1" ? "3\n" : "1\n") << name << ": " << out;
    // Every rank prints this warning once the stop save has committed. (Not rank 0's own
    // "(stop requested by a signal)" line: a signalled mpirun was seen to drop rank 0's last
    // lines in CI, while rank 1's warning, the exit status and the checkpoint were all there.)
    if (c.signal == "USR1" || c.rank_files) {
      EXPECT_NE(out.find("stopped by a signal after a checkpoint"), std::string::npos) << name << ": " << out;
    }
    EXPECT_TRUE(fs::exists(dir / "runs" / name / "checkpoints" / "latest")) << name << ": " << out;
  }
}

// Resuming lists every key that differs from the checkpoint's configuration; a change to what
// the run computes (the seed, the batch) is refused unless --allow-config-change, a change to how
// long or where it runs is not.
TEST(Cli, ConfigChangesOnResumeAreListedAndTrajectoryChangesRefused) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult first = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  RunResult refused =
      run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2 --set run.seed=7"
                              " --set rl.samples_per_prompt=2");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("with a configuration that changes the run's trajectory:\n  run.seed = 1234 -> 7\n"
                             "  rl.samples_per_prompt = 4 -> 2\n"),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--allow-config-change"), std::string::npos) << refused.err;
  EXPECT_EQ(metric_iterations(dir / "runs" / "ck" / "metrics.jsonl").size(), 1u);
  RunResult free = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2 --set checkpoint.keep_last=5");
  ASSERT_EQ(free.exit_code, 0) << free.out << free.err;
  EXPECT_NE(free.out.find("config change since iter_00000001.h5: run.iterations = 1 -> 2"), std::string::npos)
      << free.out;
  EXPECT_NE(free.out.find("checkpoint.keep_last = 3 -> 5"), std::string::npos) << free.out;
  RunResult allowed = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=3 --set run.seed=7"
                                              " --allow-config-change");
  ASSERT_EQ(allowed.exit_code, 0) << allowed.out << allowed.err;
  EXPECT_NE(allowed.out.find("run.seed = 1234 -> 7 (changes the run's trajectory)"), std::string::npos) << allowed.out;
}

// Two jobs on one run directory would interleave metrics and checkpoints: while one runs, a
// second is refused at once, naming the holder's host and pid, and touches nothing; after the
// first ends (even killed) the directory is free again.
TEST(Cli, ASecondJobOnTheSameRunIsRefused) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 0\n");
  write(dir / "second.sh",
        "set -u\n" + mpirun(2) + " train --config job.toml --set run.iterations=100000 > first.txt 2>&1 &\n"
        "pid=$!\n"
        "while [ \"$(cat runs/ck/metrics.jsonl 2>/dev/null | wc -l)\" -lt 1 ]; do sleep 0.05; done\n" +
        mpirun(2) + " train --config job.toml --set run.iterations=2 > second.txt 2>&1\n"
        "echo $? > rc2.txt\n"
        "pkill -KILL -f 'shardrl train --config job.toml --set run.iterations=100000'\nwait $pid\n");
  run_in(dir, "bash second.sh");
  EXPECT_EQ(slurp(dir / "rc2.txt"), "2\n") << slurp(dir / "second.txt");
  const std::string second = slurp(dir / "second.txt");
  EXPECT_NE(second.find("is in use by another job ("), std::string::npos) << second;
  EXPECT_NE(second.find(" pid "), std::string::npos) << second;
  EXPECT_EQ(second.find("iter 1/"), std::string::npos) << "the second job ran";
  RunResult after = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1 --no-resume --overwrite");
  EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
}

// Sets the int64 scalar `name` of an HDF5 file (a checkpoint's metadata) to `value`.
void set_int64(const fs::path& file, const char* name, std::int64_t value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), 0) << name;
  H5Dclose(d);
  H5Fclose(f);
}

// One completeness check for resume and `inspect --verify`: a checkpoint missing a tensor its job
// needs, of another format version, with counters out of range, or with a counter in range but
// not the one saved (the metadata's checksum) is refused by both, naming the file and what is
// wrong (inspect --verify passed such files before; the last one resumed with its warm-up cut).
TEST(Cli, IncompleteCheckpointsAreRefusedByResumeAndInspectAlike) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult first = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const fs::path good = dir / "runs" / "ck" / "checkpoints" / "iter_00000001.h5";
  struct Damage {
    const char* name;
    std::function<void(const fs::path&)> apply;
    std::string message;
  };
  const std::vector<Damage> damages = {
      {"no_tensor",
       [](const fs::path& f) {
         hid_t h = H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
         H5Ldelete(h, "/reference/model.norm.weight", H5P_DEFAULT);
         H5Fclose(h);
       },
       "incomplete checkpoint: 1 tensor(s)"},
      {"version", [](const fs::path& f) { set_int64(f, "/meta/format_version", 99); },
       "checkpoint format version 99 is not one this shardrl reads"},
      {"world", [](const fs::path& f) { set_int64(f, "/meta/world_size", -5); },
       "/meta/world_size = -5 is not a value a checkpoint holds"},
      {"step", [](const fs::path& f) { set_int64(f, "/optim/step", std::numeric_limits<std::int64_t>::min()); },
       "/optim/step = -9223372036854775808 is not a value a checkpoint holds"},
      {"iteration", [](const fs::path& f) { set_int64(f, "/meta/iteration", 7); },
       "/data/iterations_done = 1 is not a value a checkpoint holds (/meta/iteration = 7)"},
      {"counter", [](const fs::path& f) { set_int64(f, "/data/warmup_steps_done", 1); },
       "damaged checkpoint: its scalars and strings (/meta/format_version, "},
  };
  for (const Damage& d : damages) {
    const fs::path file = dir / (std::string(d.name) + ".h5");
    fs::copy_file(good, file, fs::copy_options::overwrite_existing);
    d.apply(file);
    RunResult inspect = run_in(dir, shardrl_binary() + " inspect " + file.string() + " --verify");
    EXPECT_EQ(inspect.exit_code, 2) << d.name << ": " << inspect.out;
    EXPECT_NE(inspect.err.find(d.message), std::string::npos) << d.name << ": " << inspect.err;
    RunResult resume = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2 --resume-from " +
                                       file.string());
    EXPECT_EQ(resume.exit_code, 2) << d.name << ": " << resume.out;
    EXPECT_NE(resume.err.find(d.message), std::string::npos) << d.name << ": " << resume.err;
  }
  RunResult intact = run_in(dir, shardrl_binary() + " inspect " + good.string() + " --verify");
  EXPECT_EQ(intact.exit_code, 0) << intact.err;
  // And `report`, which called the checkpoint missing a tensor "all verified", a resume's start.
  fs::create_directories(dir / "runs/gap/checkpoints");
  fs::copy_file(dir / "runs/ck/config.toml", dir / "runs/gap/config.toml");
  fs::copy_file(dir / "no_tensor.h5", dir / "runs/gap/checkpoints/iter_00000001.h5");
  RunResult report = run_in(dir, shardrl_binary() + " report runs/gap");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string md = slurp(dir / "runs/gap/report.md");
  EXPECT_NE(md.find("| `iter_00000001.h5` (a resume starts here, and stops) | 1 | "), std::string::npos) << md;
  EXPECT_NE(md.find("**incomplete checkpoint: 1 tensor(s) its job needs are missing: /reference/model.norm.weight**"),
            std::string::npos)
      << md;
  // Skipped steps are not counted among the steps: a run whose non-finite steps outnumber its
  // taken ones (a diverging warm-up) saved checkpoints that inspect and resume refused. (The
  // file's checksum is removed with the change, as in a checkpoint written before it existed.)
  const fs::path skipping = dir / "skipping.h5";
  fs::copy_file(good, skipping, fs::copy_options::overwrite_existing);
  set_int64(skipping, "/optim/skipped", 1000);
  hid_t h = H5Fopen(skipping.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(H5Ldelete(h, "/meta/checksum", H5P_DEFAULT), 0);
  H5Fclose(h);
  RunResult inspect = run_in(dir, shardrl_binary() + " inspect " + skipping.string() + " --verify");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  RunResult resume = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2 --set run.name=branch "
                                     "--resume-from " + skipping.string());
  EXPECT_EQ(resume.exit_code, 0) << resume.out << resume.err;
}

// SIGKILL at seeded random moments while the job saves (a pause between tensors makes saving
// most of the run): every time, each committed checkpoint verifies and the next start resumes
// from a complete one. `name`: the config's (pkill must not match the jobs of tests running
// beside this one); `async`: checkpoint.async, the kills landing while the writer thread writes.
void killed_while_saving_always_resumes(const std::string& name, bool async, int rounds) {
  fs::path dir = test_dir();
  const std::string toml = name + ".toml";
  write(dir / toml, std::string(kCheckpointJob) + "[checkpoint]\ninterval = 1\nkeep_last = 2\nasync = " +
                        (async ? "true" : "false") + "\n[debug]\nsave_pause_ms = 5\n");
  // Kills land between the end of start-up and a few seconds of saving after it: start-up is
  // timed here with a whole one-iteration job (elsewhere), since it varies with the machine and
  // its load (MPI, CUDA and NCCL initialisation on a GPU machine shared by other tests).
  fs::create_directories(dir / "timing");
  fs::copy_file(dir / toml, dir / "timing" / toml);
  const RunResult timing = run_in(dir / "timing", mpirun(2) + " train --config " + toml + " --set run.iterations=1");
  ASSERT_EQ(timing.exit_code, 0) << timing.err;
  const int start_ms = std::max(1200, static_cast<int>(1000 * timing.seconds));
  std::mt19937 rng(20261121);
  std::uniform_int_distribution<int> delay_ms(start_ms, start_ms + 2800);
  const fs::path ckpt = dir / "runs" / "ck" / "checkpoints";
  int resumed = 0, inside_a_save = 0;
  for (int round = 0; round < rounds; ++round) {
    const int ms = delay_ms(rng);
    write(dir / "round.sh", mpirun(2) + " train --config " + toml + " --set run.iterations=100000 > out.txt 2>&1 &\n"
                            "sleep " + std::to_string(ms / 1000.0) + "\npkill -KILL -f 'train --config " + toml + "'\n"
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
        RunResult verify = run_in(dir, shardrl_binary() + " inspect " + f.path().string() + " --verify");
        EXPECT_EQ(verify.exit_code, 0) << "round " << round << " (" << ms << " ms): " << verify.err;
      }
    if (fs::exists(ckpt / "latest")) {
      const std::string latest = slurp(ckpt / "latest");
      EXPECT_TRUE(fs::exists(ckpt / latest.substr(0, latest.find('\n')))) << "round " << round;
    }
  }
  EXPECT_GE(resumed, rounds / 2) << "most rounds should have started from an earlier round's checkpoint";
  EXPECT_GE(inside_a_save, rounds * 2 / 5) << "most kills should land inside a save (a .partial left behind)";
  ASSERT_TRUE(fs::exists(ckpt / "latest"));
  const std::string latest = slurp(ckpt / "latest");
  const std::int64_t done = std::stoll(latest.substr(5, 8));
  RunResult finish = run_in(dir, mpirun(2) + " train --config " + toml + " --set debug.save_pause_ms=0 --set run.iterations=" +
                                     std::to_string(done + 1));
  EXPECT_EQ(finish.exit_code, 0) << finish.out << finish.err;
  EXPECT_NE(finish.out.find("resumed from runs/ck/checkpoints/" + latest.substr(0, latest.find('\n'))), std::string::npos)
      << finish.out;
}

TEST(Cli, KilledWhileSavingAlwaysResumes) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  killed_while_saving_always_resumes("killed", false, 10);
}
TEST(Cli, KilledWhileSavingInTheBackgroundAlwaysResumes) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  killed_while_saving_always_resumes("killed_async", true, 6);
}

// checkpoint.async with a SIGUSR1 while a periodic save is being written: the job finishes its
// iteration, waits for the save in flight (committed, reported), then saves its last iteration
// and exits 3; every checkpoint left verifies, and `latest` names the last iteration.
TEST(Cli, SignalWaitsForTheBackgroundSaveThenSaves) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "signalled_async.toml",
        std::string(kCheckpointJob) + "[checkpoint]\ninterval = 1\nkeep_last = 5\nasync = true\n[debug]\nsave_pause_ms = 10\n");
  write(dir / "stop.sh", "set -u\n" + mpirun(2) + " train --config signalled_async.toml --set run.iterations=100000 "
        "> out1.txt 2>&1 &\npid=$!\n"
        "while [ \"$(cat runs/ck/metrics.jsonl 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.05; done\n"
        "pkill -USR1 -f '^[^ ]*shardrl train --config signalled_async.toml'\nwait $pid\necho $? > rc1.txt\n");
  run_in(dir, "bash stop.sh");
  const std::string out = slurp(dir / "out1.txt");
  ASSERT_EQ(slurp(dir / "rc1.txt"), "3\n") << out;
  const std::size_t stopped = out.find("(stop requested by a signal)");
  ASSERT_NE(stopped, std::string::npos) << out;
  const std::size_t background = out.rfind("(interval) written in the background", stopped);
  EXPECT_NE(background, std::string::npos) << "the save in flight is waited for and reported first: " << out;
  const std::size_t iterations = metric_iterations(dir / "runs" / "ck" / "metrics.jsonl").size();
  char last[32];
  std::snprintf(last, sizeof last, "iter_%08zu.h5", iterations);
  const fs::path ckpt = dir / "runs" / "ck" / "checkpoints";
  const std::string latest = slurp(ckpt / "latest");
  EXPECT_EQ(latest.substr(0, latest.find('\n')), last);
  int files = 0;
  for (const auto& f : fs::directory_iterator(ckpt)) {
    EXPECT_NE(f.path().extension(), ".partial") << f.path();
    if (f.path().extension() != ".h5") continue;
    ++files;
    RunResult verify = run_in(dir, shardrl_binary() + " inspect " + f.path().string() + " --verify");
    EXPECT_EQ(verify.exit_code, 0) << verify.err;
  }
  EXPECT_GE(files, 2) << "a background save and the signal's";
}

}  // namespace
