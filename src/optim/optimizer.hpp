// The optimizer of the sharded train step, all on the device: the learning-rate schedule, the
// step counter, global gradient-norm clipping, skipping a step whose gradients are not finite,
// and AdamW on flat slices whose gradient and state buffers may each be fp32 or bf16 (read in
// their own type: no cast copy of a gradient or weight ever exists). The host never reads a
// value inside a step; it reads StepMetrics afterwards.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "core/ledger_view.hpp"
#include "core/lr_schedule.hpp"

namespace shardrl {

struct OptimizerOptions {
  float lr = 3e-4f;             // peak learning rate
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;    // decoupled; applied per range (see update)
  LrSchedule schedule = LrSchedule::constant;
  std::int64_t warmup_steps = 0;   // linear warm-up from lr/warmup to lr over these steps
  std::int64_t decay_steps = 0;    // cosine: from the end of warm-up to lr*min_lr_ratio over these
  float min_lr_ratio = 0.1f;
  float clip_grad_norm = 1.0f;     // 0: no clipping
};

// Read by the host after a step (one small copy).
struct StepMetrics {
  std::int64_t step = 0;           // optimizer steps taken (skipped ones not counted)
  std::int64_t skipped = 0;        // steps skipped for non-finite gradients, in total
  float lr = 0;                    // learning rate used by the last step
  float grad_norm = 0;             // global gradient norm before clipping, of the last step
  bool last_skipped = false;
  std::int64_t schedule_start = 0;   // the steps before the learning-rate schedule's first (start_schedule)
};

class Optimizer {
 public:
  Optimizer(const OptimizerOptions& options, const ExecSpace& space);

  // Zeroes the sum-of-squares accumulator; call before accumulate_sumsq of a step.
  void begin_norm();
  // Adds sum(g^2) over g[0..n) to the accumulator (in fp64, so squares of large finite fp32
  // gradients do not overflow into a skipped step), on the device.
  template <class G>
  void accumulate_sumsq(const G* g, long n);
  // The accumulator's device address (one double): the caller all-reduces it (sum, fp64) across
  // ranks between accumulate_sumsq and prepare_step.
  double* sumsq() const;

  // Single-thread device kernel: grad_norm = sqrt(sumsq); skip = !isfinite(grad_norm);
  // clip = clip_grad_norm > 0 ? min(1, clip_grad_norm / (grad_norm + 1e-6)) : 1; if not
  // skipped: step += 1, lr = schedule(step) and the bias corrections 1 - beta^step (computed
  // here once, in fp64, rather than per element in update); else skipped += 1.
  void prepare_step();

  // AdamW on n elements with the step's lr, clip scale and step count; does nothing when the
  // step is skipped. g_used = clip * g; m, v in S (fp32 or bf16, rounded on store);
  //   w -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * w)
  // With `compute`, the weights' bf16 compute copy is rounded from the updated w in the same
  // pass (a separate cast would read all of w again).
  template <class G, class S>
  void update(float* w, const G* g, S* m, S* v, long n, float weight_decay, bf16* compute = nullptr);

  StepMetrics read_metrics() const;   // host copy (synchronises with the space)
  const OptimizerOptions& options() const { return options_; }

  // The peak learning rate of the schedule from the next prepare_step on (the supervised
  // warm-up trains at its own rate, then RL at optim.lr). Kept on the device, where
  // prepare_step reads it, so a step captured before the change follows it.
  void set_peak_lr(float lr);
  // The schedule (warm-up, decay) starts again from the next step, at peak `lr`: RL after the
  // supervised warm-up gets its own warm-up and decay (optim.warmup_steps and decay_steps count
  // RL steps), where it began at the warm-up's end, or past it. Adam's bias correction keeps
  // counting every step. Device-side, like set_peak_lr.
  void start_schedule(float lr);

  // Restore (checkpoint resume): counters as saved. Synchronises with the space.
  void set_counters(std::int64_t step, std::int64_t skipped, std::int64_t schedule_start = 0);

 private:
  OptimizerOptions options_;
  ExecSpace space_;
  // [0] sumsq, [1] grad_norm, [2] clip, [3] lr, [4] skip (0/1); counters as doubles are exact
  // to 2^53: [5] step, [6] skipped; [7] one accumulate_sumsq's partial sum; [8] 1 - beta1^step,
  // [9] 1 - beta2^step; [10] the peak lr; [11] the step the schedule counts from. Allocated once,
  // never re-pointed.
  LedgerView<double> scalars_;
  // read_metrics' staging copy (the same memory as scalars_ where the device is the host).
  Kokkos::View<double*, MemSpace>::HostMirror host_scalars_;
};

// The schedule, shared by the device kernel and host-side tests: lr at `step` (1-based, counted
// from the schedule's start).
// Linear warm-up over warmup_steps (any schedule), then constant, or a cosine from lr down to
// lr * min_lr_ratio over decay_steps that stays there afterwards.
KOKKOS_INLINE_FUNCTION float scheduled_lr(const OptimizerOptions& o, std::int64_t step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps)
    return o.lr * static_cast<float>(step) / static_cast<float>(o.warmup_steps);
  if (o.schedule == LrSchedule::constant) return o.lr;
  const float t =
      fminf(1.0f, static_cast<float>(step - o.warmup_steps) / static_cast<float>(o.decay_steps));
  const float pi = 3.14159265358979f;
  return o.lr * (o.min_lr_ratio + (1.0f - o.min_lr_ratio) * 0.5f * (1.0f + cosf(pi * t)));
}

}  // namespace shardrl
