// The optimizer's kernels. Every per-step method only enqueues kernels on the optimizer's
// execution space and reads its inputs (lr, clip, skip, step) from the device, so the host never
// waits inside a step and a whole step can be captured in a CUDA graph.
#include "optim/optimizer.hpp"

#include "core/error.hpp"
#include "optim/adamw.hpp"

namespace shardrl {
namespace {

// Slots of Optimizer::scalars_ (see optimizer.hpp). An enum, not static members, so device code
// uses them by value.
enum Slot : int {
  kSumsq = 0,
  kGradNorm = 1,
  kClip = 2,
  kLr = 3,
  kSkip = 4,
  kStep = 5,
  kSkipped = 6,
  kPartialSumsq = 7,
  kBias1 = 8,
  kBias2 = 9,
  kPeakLr = 10,
  kScheduleStart = 11,
  kSlotCount = 12
};

using OneThread = Kokkos::RangePolicy<ExecSpace>;

}  // namespace

Optimizer::Optimizer(const OptimizerOptions& options, const ExecSpace& space)
    : options_(options), space_(space), scalars_(MemoryCategory::workspace, "optimizer_scalars", kSlotCount) {
  SHARDRL_CHECK(options_.warmup_steps >= 0 && options_.decay_steps >= 0,
                "warm-up and decay step counts must not be negative");
  SHARDRL_CHECK(options_.schedule != LrSchedule::cosine || options_.decay_steps > 0,
                "the cosine schedule needs decay_steps > 0");
  SHARDRL_CHECK(options_.clip_grad_norm >= 0.0f, "clip_grad_norm must be >= 0 (0 disables clipping)");
  host_scalars_ = Kokkos::create_mirror_view(scalars_.view());
  set_peak_lr(options_.lr);
  space_.fence();
}

void Optimizer::set_peak_lr(float lr) {
  options_.lr = lr;
  auto s = scalars_.view();
  const double peak = lr;
  Kokkos::parallel_for(
      "optimizer_set_peak_lr", OneThread(space_, 0, 1), KOKKOS_LAMBDA(const long) { s(kPeakLr) = peak; });
}

void Optimizer::start_schedule(float lr) {
  set_peak_lr(lr);
  auto s = scalars_.view();
  Kokkos::parallel_for(
      "optimizer_start_schedule", OneThread(space_, 0, 1),
      KOKKOS_LAMBDA(const long) { s(kScheduleStart) = s(kStep); });
}

void Optimizer::begin_norm() {
  auto s = scalars_.view();
  Kokkos::parallel_for(
      "optimizer_begin_norm", OneThread(space_, 0, 1), KOKKOS_LAMBDA(const long) { s(kSumsq) = 0.0; });
}

template <class G>
void Optimizer::accumulate_sumsq(const G* g, long n) {
  if (n <= 0) return;
  auto s = scalars_.view();
  // A reduction overwrites its result, so it lands in a scratch slot (a device View: no fence,
  // no host copy) and a one-thread kernel adds it to the accumulator.
  auto partial = Kokkos::subview(s, static_cast<int>(kPartialSumsq));
  Kokkos::parallel_reduce(
      "optimizer_sumsq", Kokkos::RangePolicy<ExecSpace>(space_, 0, n),
      KOKKOS_LAMBDA(const long i, double& acc) {
        const double x = static_cast<float>(g[i]);
        acc += x * x;
      },
      partial);
  Kokkos::parallel_for(
      "optimizer_sumsq_add", OneThread(space_, 0, 1),
      KOKKOS_LAMBDA(const long) { s(kSumsq) += s(kPartialSumsq); });
}

double* Optimizer::sumsq() const { return scalars_.data() + kSumsq; }

void Optimizer::prepare_step() {
  auto s = scalars_.view();
  const OptimizerOptions options = options_;
  Kokkos::parallel_for(
      "optimizer_prepare_step", OneThread(space_, 0, 1), KOKKOS_LAMBDA(const long) {
        OptimizerOptions o = options;
        o.lr = static_cast<float>(s(kPeakLr));   // device-side: a captured step sees set_peak_lr
        const double norm = sqrt(s(kSumsq));
        const bool finite = (norm - norm) == 0.0;   // false for inf and nan
        s(kGradNorm) = norm;
        s(kSkip) = finite ? 0.0 : 1.0;
        double clip = 1.0;
        if (finite && o.clip_grad_norm > 0.0f) {
          const double c = static_cast<double>(o.clip_grad_norm) / (norm + 1e-6);
          clip = c < 1.0 ? c : 1.0;
        }
        s(kClip) = clip;
        if (finite) {
          const double step = s(kStep) + 1.0;
          s(kStep) = step;
          s(kLr) = scheduled_lr(o, static_cast<std::int64_t>(step - s(kScheduleStart)));
          s(kBias1) = 1.0 - pow(static_cast<double>(o.beta1), step);
          s(kBias2) = 1.0 - pow(static_cast<double>(o.beta2), step);
        } else {
          s(kSkipped) += 1.0;
        }
      });
}

template <class G, class S>
void Optimizer::update(float* w, const G* g, S* m, S* v, long n, float weight_decay, bf16* compute) {
  if (n <= 0) return;
  auto s = scalars_.view();
  const float beta1 = options_.beta1, beta2 = options_.beta2, eps = options_.eps;
  Kokkos::parallel_for(
      "optimizer_update", Kokkos::RangePolicy<ExecSpace>(space_, 0, n), KOKKOS_LAMBDA(const long i) {
        if (s(kSkip) != 0.0) return;
        const AdamWStepConstants k{static_cast<float>(s(kLr)),    beta1, beta2, eps, weight_decay,
                                   static_cast<float>(s(kBias1)), static_cast<float>(s(kBias2))};
        adamw_element(w[i], static_cast<float>(s(kClip)) * static_cast<float>(g[i]), m[i], v[i], k);
        if (compute != nullptr) compute[i] = bf16(w[i]);
      });
}

StepMetrics Optimizer::read_metrics() const {
  Kokkos::deep_copy(space_, host_scalars_, scalars_.view());
  space_.fence();
  StepMetrics out;
  out.step = static_cast<std::int64_t>(host_scalars_(kStep));
  out.skipped = static_cast<std::int64_t>(host_scalars_(kSkipped));
  out.lr = static_cast<float>(host_scalars_(kLr));
  out.grad_norm = static_cast<float>(host_scalars_(kGradNorm));
  out.last_skipped = host_scalars_(kSkip) != 0.0;
  out.schedule_start = static_cast<std::int64_t>(host_scalars_(kScheduleStart));
  return out;
}

void Optimizer::set_counters(std::int64_t step, std::int64_t skipped, std::int64_t schedule_start) {
  SHARDRL_CHECK(step >= 0 && skipped >= 0, "step counters must not be negative");
  SHARDRL_CHECK(schedule_start >= 0 && schedule_start <= step, "the schedule starts within the steps taken");
  auto s = scalars_.view();
  const double step_d = static_cast<double>(step), skipped_d = static_cast<double>(skipped),
               start_d = static_cast<double>(schedule_start);
  Kokkos::parallel_for(
      "optimizer_set_counters", OneThread(space_, 0, 1), KOKKOS_LAMBDA(const long) {
        s(kStep) = step_d;
        s(kSkipped) = skipped_d;
        s(kScheduleStart) = start_d;
      });
  space_.fence();
}

void adamw_update(const ExecSpace& space, float* w, const float* g, float* m, float* v, long n,
                  const AdamWHyper& h, long step) {
  const AdamWStepConstants k{h.lr,
                             h.beta1,
                             h.beta2,
                             h.eps,
                             h.weight_decay,
                             adamw_bias_correction(h.beta1, static_cast<double>(step)),
                             adamw_bias_correction(h.beta2, static_cast<double>(step))};
  Kokkos::parallel_for(
      "adamw_update", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(const long i) { adamw_element(w[i], g[i], m[i], v[i], k); });
}

template void Optimizer::accumulate_sumsq<float>(const float*, long);
template void Optimizer::accumulate_sumsq<bf16>(const bf16*, long);
template void Optimizer::update<float, float>(float*, const float*, float*, float*, long, float, bf16*);
template void Optimizer::update<float, bf16>(float*, const float*, bf16*, bf16*, long, float, bf16*);
template void Optimizer::update<bf16, float>(float*, const bf16*, float*, float*, long, float, bf16*);
template void Optimizer::update<bf16, bf16>(float*, const bf16*, bf16*, bf16*, long, float, bf16*);

}  // namespace shardrl
