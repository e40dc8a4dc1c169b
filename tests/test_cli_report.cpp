// `shardrl report RUN_DIR` on a real run (2 ranks, the quickstart shortened): the report names
// the keys the run changed, its iterations and reward, draws the curves, gives each phase's time
// and verifies each checkpoint; a checkpoint with a damaged tensor is reported as failing, and a
// directory that is not a run is refused.
#include <fstream>

#include "cli_harness.hpp"

namespace {

using namespace cli_test;

TEST(Cli, ReportSummarisesARun) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  const fs::path dir = test_dir();
  RunResult job = run_in(dir, mpirun(2) + " train --config " + std::string(SHARDRL_SOURCE_DIR) +
                                  "/configs/quickstart.toml --set run.dir=runs --set run.name=r --set run.iterations=3 "
                                  "--set rl.sft_steps=1 --set checkpoint.interval=2");
  ASSERT_EQ(job.exit_code, 0) << job.err;
  RunResult report = run_in(dir, shardrl_binary() + " report runs/r");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(report.out, "runs/r/report.md\n");
  const std::string md = slurp(dir / "runs/r/report.md");
  EXPECT_NE(md.find("| `run.iterations` | `3` | `10` |"), std::string::npos) << md;
  EXPECT_NE(md.find("3 iteration(s), 0 to 2."), std::string::npos) << md;
  EXPECT_NE(md.find("| `reward_mean` |"), std::string::npos) << md;
  EXPECT_NE(md.find("![reward, loss and throughput](report_curves.png)"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(dir / "runs/r/report_curves.png"));
  EXPECT_NE(md.find("| rollout | "), std::string::npos) << md;
  EXPECT_NE(md.find("| `iter_00000002.h5` | 2 | "), std::string::npos) << md;
  EXPECT_NE(md.find("| `iter_00000003.h5` (a resume starts here) | 3 | "), std::string::npos) << md;
  EXPECT_EQ(md.find("fail"), std::string::npos) << md;

  // Bytes flipped inside the earlier checkpoint (most of it is tensor data): it fails its checksums
  // or no longer opens.
  const fs::path ckpt = dir / "runs/r/checkpoints/iter_00000002.h5";
  const auto size = fs::file_size(ckpt);
  {
    std::fstream f(ckpt, std::ios::in | std::ios::out | std::ios::binary);
    for (const auto at : {size / 4, size / 2, 3 * size / 4}) {
      f.seekg(static_cast<std::streamoff>(at));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(static_cast<std::streamoff>(at));
      f.write(&c, 1);
    }
  }
  RunResult damaged = run_in(dir, shardrl_binary() + " report runs/r --out damaged.md");
  ASSERT_EQ(damaged.exit_code, 0) << damaged.err;
  const std::string d = slurp(dir / "damaged.md");
  // A report written elsewhere has its curves beside it, not in the run directory (a read-only or
  // shared one), linked by their name.
  EXPECT_NE(d.find("![reward, loss and throughput](damaged_curves.png)"), std::string::npos) << d;
  EXPECT_TRUE(fs::exists(dir / "damaged_curves.png"));
  const std::size_t row = d.find("| `iter_00000002.h5` |");
  ASSERT_NE(row, std::string::npos) << d;
  const std::string line = d.substr(row, d.find('\n', row) - row);
  EXPECT_TRUE(line.find("fail") != std::string::npos || line.find("unreadable") != std::string::npos) << line;

  // A report whose name holds a space: the link's target in angle brackets (it ended at the space).
  fs::create_directories(dir / "my runs");
  fs::copy(dir / "runs/r", dir / "my runs/r", fs::copy_options::recursive);
  RunResult spaced = run_in(dir, shardrl_binary() + " report 'my runs/r' --out 'my report.md'");
  ASSERT_EQ(spaced.exit_code, 0) << spaced.err;
  EXPECT_NE(slurp(dir / "my report.md").find("![reward, loss and throughput](<my report_curves.png>)"),
            std::string::npos)
      << slurp(dir / "my report.md");

  RunResult missing = run_in(dir, shardrl_binary() + " report nowhere");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err, "shardrl: 'nowhere' is not a run directory\n");

  // The report replaces an earlier report (above, twice), never another file: --out naming the
  // run's metrics is refused with the file untouched (it was replaced by the report).
  const std::string metrics = slurp(dir / "runs/r/metrics.jsonl");
  RunResult over_metrics = run_in(dir, shardrl_binary() + " report runs/r --out runs/r/metrics.jsonl");
  EXPECT_EQ(over_metrics.exit_code, 2);
  EXPECT_NE(over_metrics.err.find("'runs/r/metrics.jsonl' exists and is not an earlier report"), std::string::npos)
      << over_metrics.err;
  EXPECT_EQ(slurp(dir / "runs/r/metrics.jsonl"), metrics);
  // On several ranks every rank would write the same files: refused (it failed renaming them).
  RunResult two = run_in(dir, mpirun(2) + " report runs/r");
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.err.find("report runs as one process (started with 2)"), std::string::npos) << two.err;
  // So are the other commands of one process, once (each rank printed, mixed mid-line).
  for (const std::string command : {"inspect runs/r/checkpoints/iter_00000003.h5", "score --answer 1 --completion 1"}) {
    RunResult many = run_in(dir, mpirun(2) + " " + command);
    EXPECT_EQ(many.exit_code, 2) << command;
    const std::string said = command.substr(0, command.find(' ')) + " runs as one process (started with 2)";
    EXPECT_NE(many.err.find(said), std::string::npos) << many.err;
    EXPECT_EQ(many.err.find(said), many.err.rfind(said)) << "said once: " << many.err;
    EXPECT_EQ(many.out, "") << command;
  }
  // A run with evaluations (before iteration 0 and a final one, its own record at the iteration
  // count): the phases' means are over the iterations but the first, the final evaluation's
  // record is no iteration, and the evaluations' mean is over both.
  fs::create_directories(dir / "runs/v");
  fs::copy_file(dir / "runs/r/config.toml", dir / "runs/v/config.toml");
  write(dir / "runs/v/metrics.jsonl",
        "{\"iteration\": 0, \"reward_mean\": 0.1, \"rollout_s\": 10, \"train_s\": 20, \"eval/pass@1\": 0.2, "
        "\"eval_s\": 5}\n"
        "{\"iteration\": 1, \"reward_mean\": 0.2, \"rollout_s\": 2, \"train_s\": 4}\n"
        "{\"iteration\": 2, \"reward_mean\": 0.3, \"rollout_s\": 4, \"train_s\": 6}\n"
        "{\"iteration\": 3, \"eval/pass@1\": 0.5, \"eval_s\": 7}\n");
  RunResult evals = run_in(dir, shardrl_binary() + " report runs/v");
  ASSERT_EQ(evals.exit_code, 0) << evals.err;
  const std::string v = slurp(dir / "runs/v/report.md");
  EXPECT_NE(v.find("3 iteration(s), 0 to 2, and a final evaluation."), std::string::npos) << v;
  EXPECT_NE(v.find("Means over 2 iteration(s), the first left out."), std::string::npos) << v;
  EXPECT_NE(v.find("| rollout | 3 |"), std::string::npos) << v;
  EXPECT_NE(v.find("| train | 5 |"), std::string::npos) << v;
  EXPECT_NE(v.find("| evaluation (2 of them) | 6 |"), std::string::npos) << v;
  EXPECT_NE(v.find("| `eval/pass@1` | 0.2 | 0.5 | 0.5 | 3 |"), std::string::npos) << v;

  // A run that diverged: its last values are null and its steps skipped, and the report says so
  // (it showed the last finite value as the last and nothing of the skipped steps); a `|` in a
  // config value is escaped (it split the table's cell); a broken `latest` is said (a resume
  // would stop there), and the checkpoint a resume takes is marked.
  fs::create_directories(dir / "runs/n/checkpoints");
  write(dir / "runs/n/config.toml", "[run]\ndir = \"a|b\"\n");
  write(dir / "runs/n/metrics.jsonl",
        "{\"iteration\": 0, \"reward_mean\": 0.1, \"loss\": 0.5, \"skipped_steps\": 0, \"rollout_s\": 1}\n"
        "{\"iteration\": 1, \"reward_mean\": 0.4, \"loss\": null, \"skipped_steps\": 1, \"rollout_s\": 1}\n"
        "{\"iteration\": 2, \"reward_mean\": null, \"loss\": null, \"skipped_steps\": 2, \"rollout_s\": 1}\n");
  fs::copy_file(dir / "runs/r/checkpoints/iter_00000002.h5", dir / "runs/n/checkpoints/iter_00000002.h5");
  write(dir / "runs/n/checkpoints/latest", "garbage\n");
  RunResult diverged = run_in(dir, shardrl_binary() + " report runs/n");
  ASSERT_EQ(diverged.exit_code, 0) << diverged.err;
  const std::string n = slurp(dir / "runs/n/report.md");
  EXPECT_NE(n.find("| `reward_mean` | 0.1 | null | 0.4 | 1 |"), std::string::npos) << n;
  EXPECT_NE(n.find("**3 optimizer step(s) skipped** for non-finite gradients (`skipped_steps`), in 2 iteration(s), "
                   "the last at iteration 2."),
            std::string::npos)
      << n;
  EXPECT_NE(n.find("**Non-finite values** (null in `metrics.jsonl`): `reward_mean` in 1 record(s) from iteration 2; "
                   "`loss` in 2 record(s) from iteration 1."),
            std::string::npos)
      << n;
  EXPECT_NE(n.find("| `run.dir` | `\"a\\|b\"` | `\"runs\"` |"), std::string::npos) << n;
  EXPECT_NE(n.find("**`latest` is unusable**: "), std::string::npos) << n;
  fs::remove(dir / "runs/n/checkpoints/latest");
  ASSERT_EQ(run_in(dir, shardrl_binary() + " report runs/n").exit_code, 0);
  const std::string no_latest = slurp(dir / "runs/n/report.md");
  EXPECT_NE(no_latest.find("There is no `latest`: a resume takes the newest committed checkpoint, `iter_00000002.h5`."),
            std::string::npos)
      << no_latest;
  // (The damaged copy from above: a resume would stop on its checksums, and the row says so.)
  EXPECT_NE(no_latest.find("| `iter_00000002.h5` (a resume starts here, and stops) | 2 | "), std::string::npos)
      << no_latest;

  // A record without its iteration is named by file and line (`{}` crashed the report).
  fs::create_directories(dir / "runs/e");
  for (const std::string& record : {std::string("{}"), std::string("{\"reward_mean\": 1}")}) {
    write(dir / "runs/e/metrics.jsonl", "{\"iteration\": 0, \"reward_mean\": 0.5}\n" + record + "\n");
    RunResult bad = run_in(dir, shardrl_binary() + " report runs/e");
    EXPECT_EQ(bad.exit_code, 2) << record;
    EXPECT_NE(bad.err.find("runs/e/metrics.jsonl:2: expected a numeric \"iteration\" field"), std::string::npos)
        << bad.err;
  }
}

}  // namespace
