// The progress bar of a long silent phase (a checkpoint save slowed by debug.save_pause_ms to
// about 3 s, past the bar's 2 s quiet start): drawn with carriage returns on a terminal (the job
// run under `script`, which gives it a pseudo-terminal), and absent from a Slurm job's log (the
// same run with SLURM_JOB_ID set), where mpirun's ranks write to Open MPI's pseudo-terminal as
// anywhere else.
#include <cstdlib>

#include "cli_harness.hpp"

namespace {

using namespace cli_test;

TEST(Cli, ProgressBarOnATerminalOnly) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (std::system("command -v script > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "util-linux's `script` (a pseudo-terminal for the job) is not installed";
  const fs::path dir = test_dir();
  // SHARDRL_PROGRESS (0 for the other CLI tests) cleared: the job decides from its stdout and Slurm.
  const std::string job = "env -u SHARDRL_PROGRESS " + mpirun(2) + " train --config " + std::string(SHARDRL_SOURCE_DIR) +
                          "/configs/quickstart.toml --set run.dir=runs --set run.iterations=1 --set rl.sft_steps=0 "
                          "--set debug.save_pause_ms=40 --set run.name=";
  // Its input from /dev/null: where the suite itself runs on a terminal, `script` would read that
  // terminal from the background and stop there (SIGTTIN) until the time limit.
  RunResult terminal = run_in(dir, "script -qec \"" + job + "tty\" /dev/null < /dev/null");
  ASSERT_EQ(terminal.exit_code, 0) << terminal.out << terminal.err;
  EXPECT_NE(terminal.out.find("\rsaving checkpoint: ["), std::string::npos) << terminal.out;
  EXPECT_NE(terminal.out.find("saving checkpoint: done in"), std::string::npos) << terminal.out;
  RunResult log = run_in(dir, "env SLURM_JOB_ID=1 " + job + "log");
  // And SHARDRL_PROGRESS=1 forces it where the job would not draw it.
  RunResult forced = run_in(dir, "env SLURM_JOB_ID=1 SHARDRL_PROGRESS=1 " + mpirun(2) + job.substr(job.find(" train ")) + "forced");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_NE(forced.out.find("\rsaving checkpoint: ["), std::string::npos);
  ASSERT_EQ(log.exit_code, 0) << log.err;
  EXPECT_EQ(log.out.find("saving checkpoint: ["), std::string::npos) << "a log file gets no bar";
  EXPECT_EQ(log.out.find('\r'), std::string::npos);
}

}  // namespace
