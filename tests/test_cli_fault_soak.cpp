// The fault-injection soak: one run, driven through a seeded sequence of faults, each landing at
// a seeded random moment: the whole job SIGKILLed, one rank SIGKILLed, one rank SIGSTOPped (its
// peer's timeout must end the job), and a write failure at a rank-0 I/O point (the metrics record
// or a checkpoint's commit, debug.fail_io). After every fault the same command is run again and
// must resume from the checkpoint `latest` names (or, when a kill landed between a commit and its
// pointer, the newest committed one), and the metrics must hold each iteration exactly once, in
// order. Bounded: 10 faults and a final run, about a minute on 2 cores.
//
// SHARDRL_SOAK_SEED picks another sequence (the seed is printed on failure).
#include <algorithm>
#include <cstdlib>
#include <random>
#include <regex>

#include "cli_harness.hpp"

namespace {

using namespace cli_test;

enum class Fault { kill_job, kill_rank, stop_rank, fail_metrics, fail_commit };

const char* name_of(Fault f) {
  switch (f) {
    case Fault::kill_job: return "SIGKILL to the job";
    case Fault::kill_rank: return "SIGKILL to one rank";
    case Fault::stop_rank: return "SIGSTOP to one rank";
    case Fault::fail_metrics: return "a full disk writing the metrics record";
    case Fault::fail_commit: return "a full disk committing a checkpoint";
  }
  return "?";
}

// The iterations of metrics.jsonl, in file order.
std::vector<std::int64_t> logged_iterations(const fs::path& file) {
  std::vector<std::int64_t> its;
  std::istringstream in(slurp(file));
  const std::regex iteration("^\\{\"iteration\":(\\d+)[,}]");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, iteration)) its.push_back(std::stoll(m[1]));
    else its.push_back(-1);   // a line that is no record
  }
  return its;
}

// What a start must resume from: the file `latest` names, else the newest committed
// iter_*.h5, else nothing ("").
std::string expected_resume(const fs::path& ckpt) {
  if (fs::exists(ckpt / "latest")) {
    const std::string latest = slurp(ckpt / "latest");
    return latest.substr(0, latest.find('\n'));
  }
  std::string newest;
  if (fs::exists(ckpt))
    for (const auto& f : fs::directory_iterator(ckpt)) {
      const std::string name = f.path().filename().string();
      if (name.rfind("iter_", 0) == 0 && f.path().extension() == ".h5" && name > newest) newest = name;
    }
  return newest;
}

std::int64_t iterations_of(const std::string& checkpoint) {
  return checkpoint.empty() ? 0 : std::stoll(checkpoint.substr(5, 8));
}

TEST(Cli, FaultSoakAlwaysResumesWithEachIterationOnce) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  const char* env = std::getenv("SHARDRL_SOAK_SEED");
  const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : 20261123u;
  SCOPED_TRACE("SHARDRL_SOAK_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  fs::path dir = test_dir();
  // Its own config name, so that pgrep and pkill match no job of a test running beside this one.
  write(dir / "soak.toml",
        "[run]\nname = \"soak\"\niterations = 100000\n[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n"
        "[rl]\nprompts_per_iteration = 4\nsamples_per_prompt = 4\nsft_steps = 2\nkl_coef = 0.1\n"
        "[checkpoint]\ninterval = 1\nkeep_last = 3\n[comm]\ntimeout_s = 8\n");
  const std::string job = mpirun(2) + " train --config soak.toml";
  const fs::path run = dir / "runs" / "soak", ckpt = run / "checkpoints";

  // Each fault twice, in a seeded order.
  std::vector<Fault> faults{Fault::kill_job,  Fault::kill_rank,    Fault::stop_rank,  Fault::fail_metrics,
                            Fault::fail_commit, Fault::kill_job,   Fault::kill_rank,  Fault::stop_rank,
                            Fault::fail_metrics, Fault::fail_commit};
  std::shuffle(faults.begin(), faults.end(), rng);
  // Signals land between 1.5 and 4 s after the launch: from the end of start-up well into the
  // iterations and their saves (a checkpoint per iteration).
  std::uniform_int_distribution<int> delay_ms(1500, 4000);
  std::uniform_int_distribution<int> rank_of(1, 2), later(1, 3);
  int resumed = 0, stopped_named = 0;
  for (std::size_t round = 0; round < faults.size(); ++round) {
    const Fault fault = faults[round];
    const std::string from = expected_resume(ckpt);
    SCOPED_TRACE("round " + std::to_string(round) + ": " + name_of(fault) + ", resuming from '" + from + "'");
    RunResult r;
    if (fault == Fault::fail_metrics || fault == Fault::fail_commit) {
      const std::int64_t at = iterations_of(from) + later(rng);
      r = run_in(dir, job + " --set debug.fail_io='\"" + (fault == Fault::fail_metrics ? "metrics" : "commit") +
                          "\"' --set debug.fail_io_iteration=" + std::to_string(at));
      EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
      EXPECT_NE(r.err.find("No space left on device (injected"), std::string::npos) << r.err;
    } else {
      const int ms = delay_ms(rng);
      const std::string signal = fault == Fault::stop_rank ? "STOP" : "KILL";
      std::string target = "$job";   // mpirun; the ranks are its children
      if (fault != Fault::kill_job) target = "$(pgrep -P $job | sed -n " + std::to_string(rank_of(rng)) + "p)";
      write(dir / "round.sh", job + " > out.txt 2> err.txt &\njob=$!\nsleep " + std::to_string(ms / 1000.0) +
                                  "\nkill -" + signal + " " + target + "\nwait $job\necho $?\n"
                                  // Nothing of the job may outlive it (a stopped rank included).
                                  "pkill -KILL -f 'train --config soak.toml'\ntrue\n");
      RunResult driver = run_in(dir, "bash round.sh");
      r.out = slurp(dir / "out.txt");
      r.err = slurp(dir / "err.txt");
      r.exit_code = std::atoi(driver.out.c_str());
      EXPECT_NE(r.exit_code, 0) << "the job survived the fault:\n" << r.out << r.err;
      // A watched phase that overran names the stopped rank: its heartbeat went silent in the
      // phase the others are in, or (stopped between phases, e.g. right after a save's last
      // collective) it never entered that phase: "waits for: rank R (last entered: ...)".
      if (fault == Fault::stop_rank && (r.err.find("did not complete within") != std::string::npos ||
                                        r.err.find("made no progress within") != std::string::npos)) {
        EXPECT_TRUE(r.err.find("then no sign of life for") != std::string::npos ||
                    (r.err.find("waits for: rank ") != std::string::npos &&
                     r.err.find("(last entered: ") != std::string::npos))
            << "the stopped rank not named:\n" << r.err;
        ++stopped_named;
      }
    }
    // The start resumed from the checkpoint it had to, and never started afresh over a run.
    if (r.out.find("resumed from") != std::string::npos) {
      EXPECT_NE(r.out.find("resumed from runs/soak/checkpoints/" + from + ":"), std::string::npos) << r.out << r.err;
      ++resumed;
    } else if (!from.empty()) {
      EXPECT_EQ(r.out.find("warm-up 1/"), std::string::npos) << "started afresh over a run:\n" << r.out << r.err;
    }
    // Each iteration at most once, in order, from 0 (a torn last line is allowed: a kill mid-write).
    if (fs::exists(run / "metrics.jsonl")) {
      const std::vector<std::int64_t> its = logged_iterations(run / "metrics.jsonl");
      for (std::size_t i = 0; i < its.size(); ++i)
        if (its[i] != static_cast<std::int64_t>(i) && !(i + 1 == its.size() && its[i] == -1))
          ADD_FAILURE() << "metrics line " << i + 1 << " holds iteration " << its[i] << ":\n"
                        << slurp(run / "metrics.jsonl");
    }
  }
  EXPECT_GE(resumed, 7) << "most rounds should resume from an earlier round's checkpoint";
  EXPECT_GE(stopped_named, 1) << "no stop landed in a watched phase";
  // The same command, without a fault, finishes a few iterations on: every iteration once.
  const std::string from = expected_resume(ckpt);
  ASSERT_FALSE(from.empty()) << "no round left a checkpoint";
  const std::int64_t done = iterations_of(from) + 2;
  RunResult finish = run_in(dir, job + " --set run.iterations=" + std::to_string(done));
  ASSERT_EQ(finish.exit_code, 0) << finish.out << finish.err;
  EXPECT_NE(finish.out.find("resumed from runs/soak/checkpoints/" + from), std::string::npos) << finish.out;
  const std::vector<std::int64_t> its = logged_iterations(run / "metrics.jsonl");
  ASSERT_EQ(its.size(), static_cast<std::size_t>(done)) << slurp(run / "metrics.jsonl");
  for (std::size_t i = 0; i < its.size(); ++i) EXPECT_EQ(its[i], static_cast<std::int64_t>(i));
}

}  // namespace
