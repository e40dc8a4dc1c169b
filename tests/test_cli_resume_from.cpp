// --resume-from another run's checkpoint, end to end: it never replaces the run's own files or
// joins two courses in one run directory, and --requeued (slurm/run_shardrl.sh) applies the first
// run's start options only until the job has saved.
#include "cli_harness.hpp"

namespace {

using namespace cli_test;

// --resume-from another run's checkpoint into a run that holds its own at the same iteration: a
// save before the first iteration ends (a stop) would replace the run's own file, and the run's
// files would join two courses (its checkpoints and metrics before the iteration resumed at,
// which `report` and TensorBoard drew as one run), so it is refused, and --overwrite deletes the
// run's checkpoints and metrics first.
TEST(Cli, ResumingAnotherRunsCheckpointNeverReplacesTheRunsOwnAtThatIteration) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 1\n");
  for (const char* name : {"ck", "other"}) {
    RunResult r = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2 --set run.name=" + name);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  const fs::path own = dir / "runs" / "other" / "checkpoints" / "iter_00000002.h5";
  const std::string own_bytes = slurp(own);
  const std::string branch = " train --config job.toml --set run.name=other --set run.iterations=3 "
                             "--resume-from runs/ck/checkpoints/iter_00000002.h5";
  RunResult refused = run_in(dir, mpirun(2) + branch);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("is not one of this run's checkpoints, and the run directory runs/other already holds "
                             "another course's history (2 checkpoint(s), the newest iter_00000002.h5, and 2 metrics "
                             "record(s) before iteration 2)"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(slurp(own), own_bytes);
  RunResult own_file = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=other --set run.iterations=3 "
                                               "--resume-from runs/other/checkpoints/iter_00000002.h5");
  EXPECT_EQ(own_file.exit_code, 0) << "the run's own file at that iteration is no conflict: " << own_file.err;
  // Named bare from inside the run's checkpoints, it is the run's own, earlier than its newest
  // (iter_00000003.h5 now): refused as such, not taken for another run's (whose --overwrite
  // would delete every checkpoint and the metrics).
  RunResult bare = run_in(dir / "runs" / "other" / "checkpoints",
                          mpirun(2) + " train --config " + (dir / "job.toml").string() + " --set run.dir=" +
                              (dir / "runs").string() + " --set run.name=other --set run.iterations=3 "
                              "--resume-from iter_00000002.h5");
  EXPECT_EQ(bare.exit_code, 2) << bare.out << bare.err;
  EXPECT_NE(bare.err.find("already holds 1 later checkpoint(s), the newest iter_00000003.h5"), std::string::npos)
      << bare.err;
  RunResult overwritten = run_in(dir, mpirun(2) + branch + " --set run.iterations=4 --overwrite");
  EXPECT_EQ(overwritten.exit_code, 0) << overwritten.out << overwritten.err;
  EXPECT_NE(overwritten.out.find("--overwrite: deleted 3 checkpoint(s) and the metrics of runs/other (another "
                                 "course's history)"),
            std::string::npos)
      << overwritten.out;
  EXPECT_EQ(metric_iterations(dir / "runs" / "other" / "metrics.jsonl"), (std::vector<std::int64_t>{2, 3}))
      << "the course resumed alone";
}

// --requeued (slurm/run_shardrl.sh passes it to every run of a job after the first): a run whose
// job has taken its start options and saved since continues from its latest checkpoint whatever
// those options say; one whose first run stopped before (its node failed) starts as the first run
// did: from the --resume-from checkpoint, not from its initial weights or from an older course's
// checkpoints the run directory holds.
TEST(Cli, ARequeuedRunTakesItsOwnCheckpointsElseTheFirstRunsStart) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", std::string(kCheckpointJob) + "[checkpoint]\ninterval = 1\n");
  RunResult base = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2");
  ASSERT_EQ(base.exit_code, 0) << base.out << base.err;
  const std::string from = "runs/ck/checkpoints/iter_00000002.h5";
  const std::string branch = " train --config job.toml --set run.name=branch --resume-from " + from + " --requeued";

  RunResult not_saved = run_in(dir, mpirun(2) + branch + " --set run.iterations=3");
  ASSERT_EQ(not_saved.exit_code, 0) << not_saved.out << not_saved.err;
  EXPECT_NE(not_saved.out.find("--requeued: runs/branch holds no checkpoint this job saved after taking its start "
                               "options; they apply as at the job's first run"),
            std::string::npos)
      << not_saved.out;
  EXPECT_NE(not_saved.out.find("resumed from " + from + ": 2 iterations"), std::string::npos) << not_saved.out;
  EXPECT_EQ(metric_iterations(dir / "runs" / "branch" / "metrics.jsonl"), (std::vector<std::int64_t>{2}));

  RunResult saved = run_in(dir, mpirun(2) + branch + " --set run.iterations=4");
  ASSERT_EQ(saved.exit_code, 0) << saved.out << saved.err;
  EXPECT_NE(saved.out.find("--requeued: continuing runs/branch from its latest checkpoint"), std::string::npos)
      << saved.out;
  EXPECT_NE(saved.out.find("resumed from runs/branch/checkpoints/iter_00000003.h5: 3 iterations"), std::string::npos)
      << saved.out;
  EXPECT_EQ(metric_iterations(dir / "runs" / "branch" / "metrics.jsonl"), (std::vector<std::int64_t>{2, 3}));

  RunResult fresh_start = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=branch --no-resume "
                                                  "--overwrite --requeued --set run.iterations=5");
  ASSERT_EQ(fresh_start.exit_code, 0) << fresh_start.out << fresh_start.err;
  EXPECT_NE(fresh_start.out.find("resumed from runs/branch/checkpoints/iter_00000004.h5: 4 iterations"),
            std::string::npos)
      << fresh_start.out;
  EXPECT_EQ(metric_iterations(dir / "runs" / "branch" / "metrics.jsonl"), (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_TRUE(fs::exists(dir / "runs" / "branch" / "checkpoints" / "iter_00000003.h5")) << "--overwrite applied again";

  // A run directory holding an older course's checkpoint (iteration 1, saved by no run of this
  // job): the requeued run whose first run stopped before taking its options takes them now, not
  // that checkpoint (with --overwrite, which another course's history needs); and a --no-resume
  // --overwrite start deletes it as asked.
  RunResult older = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=older --set run.iterations=1");
  ASSERT_EQ(older.exit_code, 0) << older.out << older.err;
  const std::string onto = " train --config job.toml --set run.name=older --resume-from " + from +
                           " --requeued --set run.iterations=3";
  RunResult mixed = run_in(dir, mpirun(2) + onto);
  EXPECT_EQ(mixed.exit_code, 2) << mixed.out << mixed.err;
  EXPECT_NE(mixed.err.find("already holds another course's history (1 checkpoint(s), the newest iter_00000001.h5, "
                           "and 1 metrics record(s) before iteration 2)"),
            std::string::npos)
      << mixed.err;
  RunResult onto_older = run_in(dir, mpirun(2) + onto + " --overwrite");
  ASSERT_EQ(onto_older.exit_code, 0) << onto_older.out << onto_older.err;
  EXPECT_NE(onto_older.out.find("resumed from " + from + ": 2 iterations"), std::string::npos) << onto_older.out;
  EXPECT_EQ(metric_iterations(dir / "runs" / "older" / "metrics.jsonl"), (std::vector<std::int64_t>{2}));
  RunResult older2 = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=older2 --set run.iterations=2");
  ASSERT_EQ(older2.exit_code, 0) << older2.out << older2.err;
  RunResult afresh = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=older2 --no-resume --overwrite "
                                             "--requeued --set run.iterations=1");
  ASSERT_EQ(afresh.exit_code, 0) << afresh.out << afresh.err;
  EXPECT_NE(afresh.out.find("--overwrite: deleted 2 checkpoint(s)"), std::string::npos) << afresh.out;
  EXPECT_FALSE(fs::exists(dir / "runs" / "older2" / "checkpoints" / "iter_00000002.h5"));
}

// slurm/run_shardrl.sh checks its settings before it starts a rank: a requeue cap that is not a
// whole number was read only when a stop came, after the checkpoint, and then requeued anyway
// (`5x`) or ended the wrapper with bash's own message (`ten`).
TEST(Cli, TheSlurmWrapperRefusesABadRequeueCapAtOnce) {
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  for (const char* cap : {"5x", "ten", "-1"}) {
    RunResult wrapped = run_in(dir, std::string("env SLURM_JOB_ID=1 SHARDRL_BIN=") + shardrl_binary() +
                                        " SHARDRL_MAX_REQUEUES=" + cap + " bash " + SHARDRL_SOURCE_DIR +
                                        "/slurm/run_shardrl.sh job.toml");
    EXPECT_EQ(wrapped.exit_code, 2) << cap << ": " << wrapped.out << wrapped.err;
    EXPECT_NE(wrapped.err.find(std::string("SHARDRL_MAX_REQUEUES must be a whole number, not '") + cap + "'"),
              std::string::npos)
        << wrapped.err;
    EXPECT_FALSE(fs::exists(dir / "runs")) << cap << ": a rank started";
  }
}

}  // namespace
