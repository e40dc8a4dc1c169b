// A rank that fails (a fatal error, an exception no code handles) or hangs: the whole job stops,
// fast, with that rank's cause or the ranks its peers wait for.
#include "cli_harness.hpp"

namespace {

using namespace cli_test;

// A fatal error on one rank aborts the whole job, fast, naming rank, host and cause.
TEST(Cli, FailingRankStopsWholeJobWithin30Seconds) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 100000000\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set debug.fail_rank=1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("shardrl: fatal error on rank 1 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("injected failure (debug.fail_rank = 1) at iteration 0"), std::string::npos) << r.err;
}

// An exception no code handles (a bug, a library's error) on one rank: that rank prints its cause
// and ends the job at once, from std::terminate, before any destructor runs (unwinding destroyed
// the policy's communicators and device memory first, which on a GPU may wait on peers and hang
// the rank that knew the cause until its peers' watchdogs fired, blaming it as stuck).
TEST(Cli, AnUnhandledExceptionStopsTheJobWithItsCause) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 100000000\n[comm]\ntimeout_s = 60\n");
  RunResult r =
      run_in(dir, mpirun(2) + " train --config job.toml --set debug.fail_rank=1 --set debug.fail_mode='\"exception\"'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("shardrl: fatal error on rank 1 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unexpected error: injected exception (debug.fail_rank = 1) at iteration 0"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(" within comm.timeout_s"), std::string::npos) << "a watchdog fired: " << r.err;
}

// A rank that stops taking part (alive, stuck) makes its peers abort after comm.timeout_s.
TEST(Cli, HangingRankIsDetectedByTimeout) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\niterations = 100000000\n[comm]\ntimeout_s = 3\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set debug.fail_rank=1 --set debug.fail_mode=hang");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("shardrl: fatal error on rank 0 (host "), std::string::npos) << r.err;
  // (Its rollout's decode steps before the hang count as progress: "made no progress within".)
  EXPECT_TRUE(r.err.find("did not complete within comm.timeout_s = 3 s") != std::string::npos ||
              r.err.find("made no progress within comm.timeout_s = 3 s") != std::string::npos)
      << r.err;
  // The message names the rank the others wait for, from the ranks' heartbeat files.
  EXPECT_NE(r.err.find("shardrl: iteration 1 waits for: rank 1 (last entered: opening the metrics log)"),
            std::string::npos)
      << r.err;
}

// Ranks started in different working directories with a relative run.dir each see their own
// runs/: the job stops at start, every rank, naming the rank (it trained until its first save,
// then every rank hung in the collective create of the checkpoint).
TEST(Cli, ARankThatSeesAnotherRunDirectoryStopsTheJobAtStart) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  write(dir / "job.toml", "[run]\niterations = 2\n[checkpoint]\ninterval = 1\n");
  RunResult r = run_in(dir, mpirun_in_two_dirs(dir / "a", dir / "b", " train --config " + (dir / "job.toml").string()));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("runs/shardrl: rank 1 of 2 (on "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not see the run directory rank 0 (on "), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "a" / "runs" / "shardrl" / "checkpoints")) << "nothing of the run was written";
}

}  // namespace
