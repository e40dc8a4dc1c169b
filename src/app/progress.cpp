#include "app/progress.hpp"

#include <fmt/format.h>

#include <cmath>

namespace shardrl {
namespace {

std::string rate(double tokens, double seconds) {
  const double r = seconds > 0 ? tokens / seconds : 0;
  return r >= 1e4 ? fmt::format("{:.1f}k", r / 1e3) : fmt::format("{:.0f}", r);
}

}  // namespace

std::string duration_text(double seconds) {
  // Rounded once, then split: rounding each part alone printed 119.6 s as "1m60s".
  if (!(seconds > 0)) return "0s";
  const long long s = std::llround(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  const long long m = std::llround(seconds / 60);
  return fmt::format("{}h{:02}m", m / 60, m % 60);
}

std::string progress_line(const IterationReport& r) {
  const RolloutBatch& b = r.rollout;
  const TrainStats& t = r.train;
  return fmt::format(
      "iter {}/{} | reward {:.3f} pass {:.3f} len {:.1f} | loss {:+.4f} kl {:.4f} clip {:.3f} gnorm {:.3f}{} | "
      "rollout {} tok/s {:.2f}s | train {} tok/s {:.2f}s | eta {}",
      r.iteration + 1, r.total, b.reward_mean, b.pass_rate, b.response_len_mean, t.loss, t.kl, t.clip_frac,
      t.grad_norm, t.skipped ? fmt::format(" ({} skipped)", t.skipped) : "", rate(b.tokens, b.seconds), b.seconds,
      rate(t.tokens, t.seconds), t.seconds, duration_text(r.eta_s));
}

std::vector<std::pair<std::string, double>> metrics_record(const IterationReport& r) {
  const RolloutBatch& b = r.rollout;
  const TrainStats& t = r.train;
  std::vector<std::pair<std::string, double>> record{{"iteration", static_cast<double>(r.iteration)},
          {"reward_mean", b.reward_mean},
          {"reward_std", b.reward_std},
          {"pass_rate", b.pass_rate},
          {"response_len_mean", b.response_len_mean},
          {"entropy", b.entropy},
          {"kl", t.kl},
          {"aux_loss", t.aux_loss},
          {"clip_frac", t.clip_frac},
          {"grad_norm", t.grad_norm},
          {"loss", t.loss},
          {"lr", t.lr},
          {"skipped_steps", static_cast<double>(t.skipped)},
          {"rollout_train_ratio_mean", t.rollout_train_ratio_mean},
          {"rollout_train_ratio_max", t.rollout_train_ratio_max},
          {"sampling_rounds", static_cast<double>(b.sampling_rounds)},
          {"groups_dropped", static_cast<double>(b.groups_dropped)},
          {"rollout_tokens_per_s", b.seconds > 0 ? b.tokens / b.seconds : 0.0},
          {"train_tokens_per_s", t.seconds > 0 ? t.tokens / t.seconds : 0.0},
          {"rollout_s", b.seconds},
          {"train_s", t.seconds},
          {"mem_peak_bytes", static_cast<double>(r.mem_peak_bytes)}};
  for (auto& f : eval_fields(r.eval)) record.push_back(std::move(f));
  return record;
}

std::vector<std::pair<std::string, double>> eval_fields(const EvalStats& e) {
  if (e.prompts == 0) return {};
  return {{"eval/reward_mean", e.reward_mean},
          {"eval/pass@1", e.pass_at_1},
          {fmt::format("eval/pass@{}", e.k), e.pass_at_k},
          {fmt::format("eval/mean@{}", e.k), e.mean_at_k},
          {"eval_s", e.seconds}};
}

std::string eval_line(const EvalStats& e) {
  return fmt::format("eval {} prompts | pass@1 {:.3f} reward {:.3f} | pass@{} {:.3f} mean@{} {:.3f} | {:.1f}s", e.prompts,
                     e.pass_at_1, e.reward_mean, e.k, e.pass_at_k, e.k, e.mean_at_k, e.seconds);
}

std::string warmup_line(std::int64_t step, std::int64_t steps, const TrainStats& s) {
  return fmt::format("warm-up {}/{} | loss {:.4f} gnorm {:.3f}{} | {} tok/s", step + 1, steps, s.loss, s.grad_norm,
                     s.skipped ? " (skipped)" : "", rate(s.tokens, s.seconds));
}

std::string profile_line(const StepProfile& p) {
  if (p.gather_s + p.compute_s + p.reduce_s + p.optimizer_s <= 0) return "";
  return fmt::format(
      "  profile: all-gather {:.1f} ms ({} x, {:.2f} MiB)  compute {:.1f} ms  reduce-scatter {:.1f} ms "
      "({} x, {:.2f} MiB)  of them the embedding's rows {:.1f} ms  optimizer {:.1f} ms (all-reduce {} B)",
      p.gather_s * 1e3, p.all_gathers, p.all_gather_bytes / double(1 << 20), p.compute_s * 1e3, p.reduce_s * 1e3,
      p.reduce_scatters, p.reduce_scatter_bytes / double(1 << 20), p.lookup_s * 1e3, p.optimizer_s * 1e3,
      p.all_reduce_bytes);
}

}  // namespace shardrl
