// What a user sees of each iteration: one progress line (rank 0) and one metrics.jsonl record,
// built from the same numbers so the two never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/sharded_trainer.hpp"
#include "rl/grpo_loop.hpp"

namespace shardrl {

struct IterationReport {
  std::int64_t iteration = 0;   // 0-based
  std::int64_t total = 0;       // iterations of the job
  RolloutBatch rollout;         // statistics only are read
  TrainStats train;
  double eta_s = 0;
  std::int64_t mem_peak_bytes = 0;
  EvalStats eval;               // measured before this iteration's rollout (prompts = 0: none)
};

std::string progress_line(const IterationReport& r);
// A time left as the progress line shows it: "45s", "1m05s", "2h03m" (0s for none).
std::string duration_text(double seconds);
std::vector<std::pair<std::string, double>> metrics_record(const IterationReport& r);
// The eval/* fields of a record: eval/reward_mean, eval/pass@1, eval/pass@k, eval/mean@k.
std::vector<std::pair<std::string, double>> eval_fields(const EvalStats& e);
// "eval 200 prompts | pass@1 0.315 reward 0.315 | pass@4 0.540 mean@4 0.290 | 3.1s"
std::string eval_line(const EvalStats& e);
std::string warmup_line(std::int64_t step, std::int64_t steps, const TrainStats& s);
// The per-phase timings of --profile, or "" when nothing was timed.
std::string profile_line(const StepProfile& p);

}  // namespace shardrl
