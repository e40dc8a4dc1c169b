// The device optimizer (optim/optimizer.hpp) and the plain AdamW kernel (optim/adamw.hpp) against
// an fp64 host reference. Each step's reference starts from the state the device holds before
// that step, and every element is held to a bound from a first-order rounding analysis of the
// kernel's fp32 arithmetic (reference_step), so the comparison is tight at every step and with
// either state type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_test_util.hpp"
#include "optim/adamw.hpp"
#include "optim/optimizer.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::kGuard;
using test::random_values;

constexpr double kU = test::unit_roundoff<float>();    // fp32: every kernel computes in fp32
constexpr double kUb = test::unit_roundoff<bf16>();    // bf16: state storage

// ---------------------------------------------------------------------------------------------
// Reference

struct RefInput {
  double lr = 0;            // the float lr the kernel uses
  double beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;   // the float hyperparameters
  double clip = 1;
  double step = 1;
  bool bf16_state = false;
};

struct RefOutput {
  std::vector<double> w, m, v;          // after the step
  std::vector<double> w_bound, m_bound, v_bound;   // allowed |device - reference| per element
};

double round_to_bf16(double x) { return static_cast<float>(bf16(static_cast<float>(x))); }

// One AdamW step in fp64 from (w, m, v) with gradient g. The bounds, per element (u = fp32 unit
// roundoff; first order, then doubled for second-order terms):
//   g_used = clip * g             2u relative (clip rounded to float, one product)
//   m = b1 m + (1-b1) g_used      4u * (b1|m| + (1-b1)|g_used|)   (cancellation-safe: absolute)
//   v = b2 v + (1-b2) g_used^2    7u * v
//   r = (m/c1) / (sqrt(v/c2)+eps) e_m / (c1 D) + 10u |r|  (c1, c2 rounded to float; /, sqrt, +, /)
//   w -= lr (r + wd w)            lr (e_r + 3u (|r| + wd |w|)) + u |w_new|
// With bf16 state, m and v are rounded to bf16 in the reference too; the device's fp32 value may
// fall on the other side of a rounding midpoint, so one bf16 ulp (<= 2 u_bf16 |x|) is added.
// w is updated from the unrounded m, v of the step, so its bound is an fp32 bound either way.
RefOutput reference_step(const std::vector<double>& w, const std::vector<double>& g, const std::vector<double>& m,
                         const std::vector<double>& v, const RefInput& in) {
  const std::size_t n = w.size();
  RefOutput out;
  out.w.resize(n), out.m.resize(n), out.v.resize(n);
  out.w_bound.resize(n), out.m_bound.resize(n), out.v_bound.resize(n);
  const double b1 = in.beta1, b2 = in.beta2;
  const double c1 = 1.0 - std::pow(b1, in.step), c2 = 1.0 - std::pow(b2, in.step);
  for (std::size_t i = 0; i < n; ++i) {
    const double gu = in.clip * g[i];
    const double mi = b1 * m[i] + (1.0 - b1) * gu;
    const double vi = b2 * v[i] + (1.0 - b2) * gu * gu;
    const double em = 4 * kU * (b1 * std::fabs(m[i]) + (1.0 - b1) * std::fabs(gu));
    const double ev = 7 * kU * vi;
    const double d = std::sqrt(vi / c2) + in.eps;
    const double r = (mi / c1) / d;
    const double er = em / (c1 * d) + 10 * kU * std::fabs(r);
    const double wn = w[i] - in.lr * (r + in.weight_decay * w[i]);
    const double ew = in.lr * (er + 3 * kU * (std::fabs(r) + in.weight_decay * std::fabs(w[i]))) + kU * std::fabs(wn);
    out.w[i] = wn;
    out.w_bound[i] = 2 * ew;
    out.m[i] = in.bf16_state ? round_to_bf16(mi) : mi;
    out.v[i] = in.bf16_state ? round_to_bf16(vi) : vi;
    out.m_bound[i] = 2 * em + (in.bf16_state ? 2 * kUb * std::fabs(out.m[i]) : 0.0);
    out.v_bound[i] = 2 * ev + (in.bf16_state ? 2 * kUb * std::fabs(out.v[i]) : 0.0);
  }
  return out;
}

double clip_scale(double clip_grad_norm, double norm) {
  return clip_grad_norm > 0 ? std::fmin(1.0, clip_grad_norm / (norm + 1e-6)) : 1.0;
}

double sum_of_squares(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x * x;
  return s;
}

// |got - want| <= bound element by element (NaN fails); reports the count and the worst element.
void expect_within(const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  long failures = 0, worst = -1;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (err <= bound[i]) continue;
    ++failures;
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / bound[i];
    if (worst < 0 || ratio > worst_ratio) worst = static_cast<long>(i), worst_ratio = ratio;
  }
  if (failures > 0)
    ADD_FAILURE() << what << ": " << failures << " elements out of bound; worst " << worst << " is "
                  << got[worst] << ", reference " << want[worst] << ", bound " << bound[worst];
}

// ---------------------------------------------------------------------------------------------
// Device slices

std::vector<double> with_guard(std::vector<double> values) {
  values.resize(values.size() + kGuard, std::numeric_limits<double>::quiet_NaN());
  return values;
}

std::vector<double> first(const std::vector<double>& values, long n) {
  return std::vector<double>(values.begin(), values.begin() + n);
}

template <class T>
std::vector<unsigned char> raw_bytes(const Buffer<T>& b) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.device);
  std::vector<unsigned char> out(static_cast<std::size_t>(b.size()) * sizeof(T));
  std::memcpy(out.data(), h.data(), out.size());
  return out;
}

// One flat range the optimizer updates: fp32 weights, gradient G, state S, each followed by
// NaN guard elements (a read past n turns the norm NaN; a write past n is caught on the host).
template <class G, class S>
struct Slice {
  long n;
  Buffer<float> w;
  Buffer<G> g;
  Buffer<S> m, v;

  Slice(long n_, std::uint64_t seed) : n(n_), w(n_ + kGuard), g(n_ + kGuard), m(n_ + kGuard), v(n_ + kGuard) {
    w.set(with_guard(random_values<float>(n, seed)));
    g.set(with_guard(std::vector<double>(n, 0.0)));
    m.set(with_guard(std::vector<double>(n, 0.0)));
    v.set(with_guard(std::vector<double>(n, 0.0)));
  }
  // Gradient values in [-scale, scale), as G holds them.
  std::vector<double> set_random_grad(std::uint64_t seed, double scale) {
    std::vector<double> values = random_values<G>(n, seed, -scale, scale);
    g.set(with_guard(values));
    return values;
  }
  void set_grad(const std::vector<double>& values) { g.set(with_guard(values)); }
  void set_state(const std::vector<double>& m_values, const std::vector<double>& v_values) {
    m.set(with_guard(m_values));
    v.set(with_guard(v_values));
  }
  std::vector<double> w_host() const { return first(w.host(), n); }
  std::vector<double> m_host() const { return first(m.host(), n); }
  std::vector<double> v_host() const { return first(v.host(), n); }
  void update(Optimizer& opt, float weight_decay) { opt.update(w.data(), g.data(), m.data(), v.data(), n, weight_decay); }

  // Checks the device state against `ref` and that no guard element was written.
  void expect_matches(const RefOutput& ref, const std::string& what) const {
    expect_within(w_host(), ref.w, ref.w_bound, what + ": w");
    expect_within(m_host(), ref.m, ref.m_bound, what + ": m");
    expect_within(v_host(), ref.v, ref.v_bound, what + ": v");
    test::expect_guard_untouched(w.host(), n, (what + ": w").c_str());
    test::expect_guard_untouched(m.host(), n, (what + ": m").c_str());
    test::expect_guard_untouched(v.host(), n, (what + ": v").c_str());
  }
};

RefInput ref_input(const OptimizerOptions& o, double lr, double clip, double step, float weight_decay,
                   bool bf16_state) {
  RefInput in;
  in.lr = lr;
  in.beta1 = o.beta1, in.beta2 = o.beta2, in.eps = o.eps;
  in.weight_decay = weight_decay;
  in.clip = clip;
  in.step = step;
  in.bf16_state = bf16_state;
  return in;
}

// What a rank does between accumulate_sumsq and prepare_step (an all-reduce of the accumulator),
// here multiplying by a factor as if `factor` ranks held the same gradients.
void scale_on_device(double* value, double factor) {
  Kokkos::parallel_for(
      "scale_sumsq", Kokkos::RangePolicy<ExecSpace>(ExecSpace(), 0, 1),
      KOKKOS_LAMBDA(const long) { *value *= factor; });
}

double read_sumsq(const Optimizer& opt) {
  Kokkos::View<double, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> acc(opt.sumsq());
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), acc);
  return h();
}

// A step's reported lr: the device's cosf may differ from the host's by an ulp or two.
void expect_lr(float got, float want, const std::string& what) {
  EXPECT_NEAR(got, want, 4 * kU * std::fabs(want)) << what;
}

// ---------------------------------------------------------------------------------------------
// AdamW update, all four (gradient, state) type pairs, several steps

template <class G, class S>
struct TypePair {
  using Grad = G;
  using State = S;
};

template <class P>
class OptimizerUpdate : public ::testing::Test {};
using TypePairs = ::testing::Types<TypePair<float, float>, TypePair<float, bf16>, TypePair<bf16, float>,
                                   TypePair<bf16, bf16>>;
TYPED_TEST_SUITE(OptimizerUpdate, TypePairs);

TYPED_TEST(OptimizerUpdate, StepsMatchReference) {
  using G = typename TypeParam::Grad;
  using S = typename TypeParam::State;
  constexpr bool bf16_state = std::is_same_v<S, bf16>;
  OptimizerOptions o;
  o.lr = 1e-2f;
  o.schedule = LrSchedule::cosine;
  o.warmup_steps = 2;
  o.decay_steps = 10;
  o.clip_grad_norm = 1.0f;
  const float wd = 0.1f;
  Optimizer opt(o, ExecSpace());
  Slice<G, S> s(1000, 11);
  // Gradient scales per step: a norm of ~18 * scale, so clipping is on at some steps, off at others.
  const double scales[] = {1.0, 0.02, 0.5, 0.01, 2.0, 0.03};
  for (int k = 1; k <= 6; ++k) {
    const std::string what = "step " + std::to_string(k);
    const std::vector<double> w0 = s.w_host(), m0 = s.m_host(), v0 = s.v_host();
    const std::vector<double> g = s.set_random_grad(100 + k, scales[k - 1]);
    opt.begin_norm();
    opt.accumulate_sumsq(s.g.data(), s.n);
    opt.prepare_step();
    s.update(opt, wd);
    const StepMetrics got = opt.read_metrics();

    const double norm = std::sqrt(sum_of_squares(g));
    const float lr = scheduled_lr(o, k);
    EXPECT_EQ(got.step, k) << what;
    EXPECT_EQ(got.skipped, 0) << what;
    EXPECT_FALSE(got.last_skipped) << what;
    EXPECT_NEAR(got.grad_norm, norm, 2 * kU * norm) << what;   // fp64 sum, rounded to float once
    expect_lr(got.lr, lr, what);
    s.expect_matches(reference_step(w0, g, m0, v0, ref_input(o, lr, clip_scale(o.clip_grad_norm, norm), k, wd,
                                                            bf16_state)),
                     what);
  }
}

// ---------------------------------------------------------------------------------------------
// Clipping and the gradient norm

// Adam is invariant to a constant gradient scale (up to eps), so the clip scale is seen in m,
// which after one step from zero is (1 - beta1) * clip * g.
TEST(OptimizerClip, AboveBelowAndDisabled) {
  struct Case {
    const char* name;
    float clip_grad_norm;
    double grad_scale;
    double clip_lo, clip_hi;   // where the case's clip scale must lie, so that it shows in m
  };
  const long n = 256;   // norm of uniform [-s, s): about 9.2 s
  for (const Case& c : {Case{"above threshold", 1.0f, 1.0, 0.0, 0.2}, Case{"below threshold", 100.0f, 1.0, 1.0, 1.0},
                        Case{"disabled", 0.0f, 1000.0, 1.0, 1.0},
                        Case{"norm near the 1e-6 guard", 1e-6f, 1.1e-7, 0.3, 0.7}}) {
    OptimizerOptions o;
    o.clip_grad_norm = c.clip_grad_norm;
    Optimizer opt(o, ExecSpace());
    Slice<float, float> s(n, 21);
    const std::vector<double> w0 = s.w_host(), m0 = s.m_host(), v0 = s.v_host();
    const std::vector<double> g = s.set_random_grad(22, c.grad_scale);
    opt.begin_norm();
    opt.accumulate_sumsq(s.g.data(), n);
    opt.prepare_step();
    s.update(opt, 0.0f);
    const double norm = std::sqrt(sum_of_squares(g));
    const double clip = clip_scale(c.clip_grad_norm, norm);
    EXPECT_TRUE(clip >= c.clip_lo && clip <= c.clip_hi) << c.name << ": clip " << clip;
    EXPECT_NEAR(opt.read_metrics().grad_norm, norm, 2 * kU * norm) << c.name;   // before clipping
    s.expect_matches(reference_step(w0, g, m0, v0, ref_input(o, o.lr, clip, 1, 0.0f, false)), c.name);
  }
}

// The norm covers every accumulate_sumsq call of the step, of either dtype; sumsq() is the
// accumulator the caller all-reduces; begin_norm starts the next step from zero.
TEST(OptimizerClip, NormOverSeveralCallsAndRanks) {
  OptimizerOptions o;
  Optimizer opt(o, ExecSpace());
  std::vector<double> a, b, c;
  Buffer<float> ga = test::random_buffer<float>(300, 31, &a);
  Buffer<bf16> gb = test::random_buffer<bf16>(77, 32, &b, -4.0, 4.0);
  Buffer<float> gc = test::random_buffer<float>(5, 33, &c, -0.1, 0.1);
  const double sum = sum_of_squares(a) + sum_of_squares(b) + sum_of_squares(c);

  opt.begin_norm();
  opt.accumulate_sumsq(ga.data(), ga.size());
  opt.accumulate_sumsq(gb.data(), gb.size());
  opt.accumulate_sumsq(gc.data(), gc.size());
  EXPECT_NEAR(read_sumsq(opt), sum, 1e-13 * sum);   // fp64 accumulation, only the order differs
  scale_on_device(opt.sumsq(), 3.0);                 // the all-reduce over three equal ranks
  opt.prepare_step();
  const double norm3 = std::sqrt(3 * sum);
  EXPECT_NEAR(opt.read_metrics().grad_norm, norm3, 2 * kU * norm3);

  opt.begin_norm();
  opt.accumulate_sumsq(gb.data(), gb.size());
  opt.prepare_step();
  const double norm_b = std::sqrt(sum_of_squares(b));
  EXPECT_NEAR(opt.read_metrics().grad_norm, norm_b, 2 * kU * norm_b);
}

// Squares of finite fp32 gradients past 1.8e19 overflow fp32; accumulated in fp64 they are a
// finite norm and the step is taken.
TEST(OptimizerClip, LargeFiniteGradientsAreNotSkipped) {
  OptimizerOptions o;
  Optimizer opt(o, ExecSpace());
  Slice<float, float> s(64, 41);
  s.set_grad(std::vector<double>(64, 1e20));
  opt.begin_norm();
  opt.accumulate_sumsq(s.g.data(), s.n);
  opt.prepare_step();
  const StepMetrics got = opt.read_metrics();
  EXPECT_FALSE(got.last_skipped);
  EXPECT_EQ(got.step, 1);
  const double norm = std::sqrt(64.0 * static_cast<double>(1e20f) * static_cast<double>(1e20f));
  EXPECT_NEAR(got.grad_norm, norm, 2 * kU * norm);
}

// ---------------------------------------------------------------------------------------------
// Non-finite gradients

struct NonFiniteCase {
  const char* name;
  int buffer;        // 0: the fp32-gradient slice, 1: the bf16-gradient slice
  long index;
  double value;
};

class OptimizerNonFinite : public ::testing::TestWithParam<NonFiniteCase> {};

TEST_P(OptimizerNonFinite, SkipsTheStepAndLeavesStateBitIdentical) {
  const NonFiniteCase c = GetParam();
  OptimizerOptions o;
  o.schedule = LrSchedule::cosine;
  o.decay_steps = 5;
  Optimizer opt(o, ExecSpace());
  Slice<float, float> a(200, 51);
  Slice<bf16, bf16> b(150, 52);
  const float wd_a = 0.1f, wd_b = 0.0f;
  auto step = [&]() {
    opt.begin_norm();
    opt.accumulate_sumsq(a.g.data(), a.n);
    opt.accumulate_sumsq(b.g.data(), b.n);
    opt.prepare_step();
    a.update(opt, wd_a);
    b.update(opt, wd_b);
  };

  // A finite step first, so the state is not zero.
  a.set_random_grad(53, 1.0);
  b.set_random_grad(54, 1.0);
  step();
  const StepMetrics first_step = opt.read_metrics();
  ASSERT_EQ(first_step.step, 1);

  // The non-finite step.
  std::vector<double> ga = random_values<float>(a.n, 55), gb = random_values<bf16>(b.n, 56);
  (c.buffer == 0 ? ga : gb)[c.index] = c.value;
  a.set_grad(ga);
  b.set_grad(gb);
  const auto wa = raw_bytes(a.w), ma = raw_bytes(a.m), va = raw_bytes(a.v);
  const auto wb = raw_bytes(b.w), mb = raw_bytes(b.m), vb = raw_bytes(b.v);
  step();
  const StepMetrics skipped = opt.read_metrics();
  EXPECT_TRUE(skipped.last_skipped);
  EXPECT_EQ(skipped.step, 1);
  EXPECT_EQ(skipped.skipped, 1);
  EXPECT_EQ(skipped.lr, first_step.lr);
  EXPECT_FALSE(std::isfinite(skipped.grad_norm));
  EXPECT_TRUE(raw_bytes(a.w) == wa && raw_bytes(a.m) == ma && raw_bytes(a.v) == va) << "fp32 slice changed";
  EXPECT_TRUE(raw_bytes(b.w) == wb && raw_bytes(b.m) == mb && raw_bytes(b.v) == vb) << "bf16 slice changed";

  // A finite step proceeds as step 2 (bias correction and lr of step 2).
  const std::vector<double> wa0 = a.w_host(), ma0 = a.m_host(), va0 = a.v_host();
  const std::vector<double> wb0 = b.w_host(), mb0 = b.m_host(), vb0 = b.v_host();
  const std::vector<double> ga2 = a.set_random_grad(57, 1.0), gb2 = b.set_random_grad(58, 1.0);
  step();
  const StepMetrics next = opt.read_metrics();
  EXPECT_FALSE(next.last_skipped);
  EXPECT_EQ(next.step, 2);
  EXPECT_EQ(next.skipped, 1);
  const float lr = scheduled_lr(o, 2);
  expect_lr(next.lr, lr, "step after the skip");
  const double norm = std::sqrt(sum_of_squares(ga2) + sum_of_squares(gb2));
  const double clip = clip_scale(o.clip_grad_norm, norm);
  a.expect_matches(reference_step(wa0, ga2, ma0, va0, ref_input(o, lr, clip, 2, wd_a, false)), "fp32 slice");
  b.expect_matches(reference_step(wb0, gb2, mb0, vb0, ref_input(o, lr, clip, 2, wd_b, true)), "bf16 slice");
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
INSTANTIATE_TEST_SUITE_P(Cases, OptimizerNonFinite,
                         ::testing::Values(NonFiniteCase{"nan_fp32", 0, 17, kNaN},
                                           NonFiniteCase{"inf_bf16", 1, 3, kInf},
                                           NonFiniteCase{"minus_inf_fp32_last", 0, 199, -kInf},
                                           NonFiniteCase{"nan_bf16_last", 1, 149, kNaN}),
                         [](const ::testing::TestParamInfo<NonFiniteCase>& p) { return std::string(p.param.name); });

// ---------------------------------------------------------------------------------------------
// Schedule

// Values computed by hand; fp32 evaluation, so a few ulps of tolerance.
void expect_schedule(const OptimizerOptions& o, std::int64_t step, double want) {
  EXPECT_NEAR(scheduled_lr(o, step), want, 8 * kU * want) << "step " << step;
}

TEST(OptimizerSchedule, ConstantWarmupAndCosine) {
  OptimizerOptions o;
  o.lr = 1e-3f;
  expect_schedule(o, 1, 1e-3);
  expect_schedule(o, 1000, 1e-3);

  o.warmup_steps = 4;   // linear warm-up, then constant
  expect_schedule(o, 1, 2.5e-4);
  expect_schedule(o, 2, 5e-4);
  expect_schedule(o, 4, 1e-3);
  expect_schedule(o, 5, 1e-3);
  expect_schedule(o, 1000, 1e-3);

  o.schedule = LrSchedule::cosine;   // warm-up 4, then cosine over 10 steps down to 0.1 lr
  o.decay_steps = 10;
  o.min_lr_ratio = 0.1f;
  expect_schedule(o, 2, 5e-4);
  expect_schedule(o, 4, 1e-3);                     // end of warm-up: the peak
  expect_schedule(o, 5, 1e-3 * (0.1 + 0.9 * 0.5 * (1 + 0.95105651629515357)));   // t = 0.1
  expect_schedule(o, 9, 0.55e-3);                  // t = 0.5: halfway between lr and min
  expect_schedule(o, 14, 1e-4);                    // t = 1: lr * min_lr_ratio
  expect_schedule(o, 500, 1e-4);                   // and stays there

  o.warmup_steps = 0;   // cosine from step 0
  expect_schedule(o, 5, 0.55e-3);
  expect_schedule(o, 10, 1e-4);
}

// One step's preparation on gradient `g` (its norm, the schedule, the counters), read back.
StepMetrics prepare_step_on(Optimizer& opt, const Buffer<float>& g) {
  opt.begin_norm();
  opt.accumulate_sumsq(g.data(), g.size());
  opt.prepare_step();
  return opt.read_metrics();
}

TEST(OptimizerSchedule, DeviceLrFollowsSchedule) {
  OptimizerOptions o;
  o.lr = 2e-3f;
  o.schedule = LrSchedule::cosine;
  o.warmup_steps = 3;
  o.decay_steps = 8;
  o.min_lr_ratio = 0.2f;
  Optimizer opt(o, ExecSpace());
  Buffer<float> g = test::random_buffer<float>(32, 61);
  for (int k = 1; k <= 14; ++k) {
    const StepMetrics m = prepare_step_on(opt, g);
    EXPECT_EQ(m.step, k);
    expect_lr(m.lr, scheduled_lr(o, k), "step " + std::to_string(k));
  }
}

// The supervised warm-up's steps, then RL's: start_schedule runs the warm-up and decay again from
// the next step at RL's peak (they ran on from the warm-up's end, so RL began past its own
// warm-up, or at the cosine's floor), while Adam's bias correction counts every step; the start
// survives a restore of the counters (a resume mid-RL).
TEST(OptimizerSchedule, StartScheduleRestartsItAtTheNextStep) {
  OptimizerOptions o;
  o.lr = 2e-3f;
  o.schedule = LrSchedule::cosine;
  o.warmup_steps = 2;
  o.decay_steps = 4;
  o.min_lr_ratio = 0.1f;
  Optimizer opt(o, ExecSpace());
  Buffer<float> g = test::random_buffer<float>(32, 62);
  auto step = [&] { return prepare_step_on(opt, g); };
  for (int k = 1; k <= 6; ++k) step();   // the warm-up: past the schedule's end, at its floor
  EXPECT_NEAR(opt.read_metrics().lr, 2e-4, 1e-9);
  OptimizerOptions rl = o;
  rl.lr = 1e-3f;
  opt.start_schedule(rl.lr);
  for (int k = 1; k <= 7; ++k) {
    const StepMetrics m = step();
    EXPECT_EQ(m.step, 6 + k);
    EXPECT_EQ(m.schedule_start, 6);
    expect_lr(m.lr, scheduled_lr(rl, k), "RL step " + std::to_string(k));
  }
  // Restored as a resume would (step 13, its schedule from 6): the same next rate.
  Optimizer resumed(o, ExecSpace());
  resumed.set_counters(13, 0, 6);
  resumed.set_peak_lr(rl.lr);
  expect_lr(prepare_step_on(resumed, g).lr, scheduled_lr(rl, 8), "the step after the resume");
  expect_lr(step().lr, scheduled_lr(rl, 8), "the uninterrupted one");
}

TEST(OptimizerScheduleDeathTest, CosineNeedsDecaySteps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  OptimizerOptions o;
  o.schedule = LrSchedule::cosine;
  o.decay_steps = 0;
  EXPECT_DEATH({ Optimizer opt(o, ExecSpace()); }, "cosine schedule needs decay_steps");
}

// ---------------------------------------------------------------------------------------------
// Weight decay per range, counters restored

TEST(OptimizerUpdateRanges, WeightDecayAppliedPerCall) {
  OptimizerOptions o;
  o.lr = 2e-2f;
  Optimizer opt(o, ExecSpace());
  Slice<float, float> a(300, 71), b(300, 72);
  const float wd_a = 0.0f, wd_b = 0.3f;
  for (int k = 1; k <= 2; ++k) {
    const std::vector<double> wa = a.w_host(), ma = a.m_host(), va = a.v_host();
    const std::vector<double> wb = b.w_host(), mb = b.m_host(), vb = b.v_host();
    const std::vector<double> ga = a.set_random_grad(73 + k, 1.0), gb = b.set_random_grad(75 + k, 1.0);
    opt.begin_norm();
    opt.accumulate_sumsq(a.g.data(), a.n);
    opt.accumulate_sumsq(b.g.data(), b.n);
    opt.prepare_step();
    a.update(opt, wd_a);
    b.update(opt, wd_b);
    const double clip = clip_scale(o.clip_grad_norm, std::sqrt(sum_of_squares(ga) + sum_of_squares(gb)));
    const std::string what = "step " + std::to_string(k);
    a.expect_matches(reference_step(wa, ga, ma, va, ref_input(o, o.lr, clip, k, wd_a, false)), what + ", wd 0");
    b.expect_matches(reference_step(wb, gb, mb, vb, ref_input(o, o.lr, clip, k, wd_b, false)), what + ", wd 0.3");
  }
}

// After a resume the next step is step + 1: its lr and bias corrections (1 - 0.9^42 = 0.988
// rather than 0.1 at step 1) come from the restored counter.
TEST(OptimizerCounters, SetCountersThenStep) {
  OptimizerOptions o;
  o.lr = 1e-2f;
  o.schedule = LrSchedule::cosine;
  o.decay_steps = 100;
  Optimizer opt(o, ExecSpace());
  Slice<float, bf16> s(500, 81);
  s.set_state(random_values<bf16>(s.n, 82, -0.1, 0.1), random_values<bf16>(s.n, 83, 1e-4, 1e-2));
  opt.set_counters(41, 3);
  StepMetrics restored = opt.read_metrics();
  EXPECT_EQ(restored.step, 41);
  EXPECT_EQ(restored.skipped, 3);

  const std::vector<double> w0 = s.w_host(), m0 = s.m_host(), v0 = s.v_host();
  const std::vector<double> g = s.set_random_grad(84, 0.05);
  opt.begin_norm();
  opt.accumulate_sumsq(s.g.data(), s.n);
  opt.prepare_step();
  s.update(opt, 0.01f);
  const StepMetrics got = opt.read_metrics();
  EXPECT_EQ(got.step, 42);
  EXPECT_EQ(got.skipped, 3);
  const float lr = scheduled_lr(o, 42);
  expect_lr(got.lr, lr, "step 42");
  const double clip = clip_scale(o.clip_grad_norm, std::sqrt(sum_of_squares(g)));
  s.expect_matches(reference_step(w0, g, m0, v0, ref_input(o, lr, clip, 42, 0.01f, true)), "step 42");
}

// ---------------------------------------------------------------------------------------------
// The plain fp32 AdamW kernel shares the element update

TEST(AdamWUpdate, MatchesReference) {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.05f;
  const long n = 700;
  Slice<float, float> s(n, 91);
  s.set_state(random_values<float>(n, 92, -0.1, 0.1), random_values<float>(n, 93, 1e-4, 1e-2));
  for (long step = 3; step <= 4; ++step) {
    const std::vector<double> w0 = s.w_host(), m0 = s.m_host(), v0 = s.v_host();
    const std::vector<double> g = s.set_random_grad(94 + step, 0.1);
    adamw_update(ExecSpace(), s.w.data(), s.g.data(), s.m.data(), s.v.data(), n, h, step);
    RefInput in;
    in.lr = h.lr, in.beta1 = h.beta1, in.beta2 = h.beta2, in.eps = h.eps, in.weight_decay = h.weight_decay;
    in.step = static_cast<double>(step);
    s.expect_matches(reference_step(w0, g, m0, v0, in), "adamw_update step " + std::to_string(step));
  }
}

}  // namespace
}  // namespace shardrl
