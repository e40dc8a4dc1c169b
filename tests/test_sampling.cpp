// Sampling against host references: greedy is argmax, top-k and top-p never emit excluded
// tokens, draws follow the target distribution (chi-square, fixed seed), the recorded
// log-probability and entropy are those of softmax(logits / temperature) with nothing excluded
// (temperature 1 when greedy), and a key always draws the same token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/kokkos.hpp"
#include "rollout/sampling.hpp"

namespace shardrl {
namespace {

struct Draws {
  std::vector<std::int32_t> tokens;
  std::vector<float> logp, entropy;
};

// `rows` copies of one row of logits, each with its own key (sample index = row); with the given
// scratch (sample_scratch_floats of at least `rows` rows) or a fresh one.
template <class T>
Draws draw(const std::vector<float>& row, const SamplingOptions& opt, int rows, std::uint64_t seed = 1,
           float* scratch_in = nullptr) {
  const int V = static_cast<int>(row.size());
  DeviceView<T> logits("logits", std::size_t(rows) * V);
  Kokkos::View<std::uint64_t*, MemSpace> keys("keys", rows);
  Kokkos::View<std::int32_t*, MemSpace> token("token", rows);
  DeviceView<float> logp("logp", rows), entropy("entropy", rows);
  auto hl = Kokkos::create_mirror_view(logits);
  auto hk = Kokkos::create_mirror_view(keys);
  for (int r = 0; r < rows; ++r) {
    for (int v = 0; v < V; ++v) hl(std::size_t(r) * V + v) = T(row[v]);
    hk(r) = draw_key(seed, 3, 7, r, 11);
  }
  Kokkos::deep_copy(logits, hl);
  Kokkos::deep_copy(keys, hk);
  DeviceView<float> scratch("scratch", scratch_in ? 0 : sample_scratch_floats(rows, V));
  sample_tokens(ExecSpace(), logits.data(), keys.data(), opt, token.data(), logp.data(), entropy.data(), rows, V,
                scratch_in ? scratch_in : scratch.data());
  auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), token);
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logp);
  auto he = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), entropy);
  Draws d;
  for (int r = 0; r < rows; ++r) {
    d.tokens.push_back(ht(r));
    d.logp.push_back(hp(r));
    d.entropy.push_back(he(r));
  }
  return d;
}

// The target distribution in fp64: temperature, then top-k (ties at the k-th value kept), then
// top-p (the smallest set of most likely tokens, ties kept, whose mass reaches p).
std::vector<double> target(const std::vector<float>& row, const SamplingOptions& o) {
  const int V = static_cast<int>(row.size());
  std::vector<double> w(V);
  double mx = *std::max_element(row.begin(), row.end());
  for (int v = 0; v < V; ++v) w[v] = std::exp((row[v] - mx) / o.temperature);
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<float> sorted = row;
    std::sort(sorted.rbegin(), sorted.rend());
    for (int v = 0; v < V; ++v)
      if (row[v] < sorted[o.top_k - 1]) w[v] = 0;
  }
  if (o.top_p < 1.0f) {
    double kept = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
    double mass = 0, cut = 0;
    for (int v : order) {
      mass += w[v];
      cut = w[v];
      if (mass >= o.top_p * kept) break;
    }
    for (int v = 0; v < V; ++v)
      if (w[v] < cut) w[v] = 0;
  }
  double z = std::accumulate(w.begin(), w.end(), 0.0);
  for (auto& x : w) x /= z;
  return w;
}

std::vector<float> random_row(int V, unsigned seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> row(V);
  for (auto& x : row) x = n(gen);
  return row;
}

template <class T>
class Sampling : public ::testing::Test {};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(Sampling, Types);

TYPED_TEST(Sampling, GreedyIsArgmaxAndLogpIsLogSoftmax) {
  for (int V : {1, 7, 259, 1000}) {
    std::vector<float> row = random_row(V, V);
    for (auto& x : row) x = static_cast<float>(TypeParam(x));   // the kernel sees T-rounded logits
    row[V / 2] = row[V / 3] = *std::max_element(row.begin(), row.end()) + 1.0f;   // a tie: the first wins
    Draws d = draw<TypeParam>(row, SamplingOptions{0.0f, 0, 1.0f}, 3);
    const int argmax = std::min(V / 2, V / 3);
    double mx = row[argmax], z = 0;
    for (float x : row) z += std::exp(double(x) - mx);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(d.tokens[r], argmax) << "V=" << V;
      EXPECT_NEAR(d.logp[r], -std::log(z), 1e-5) << "V=" << V;
    }
  }
}

// The full distribution at temperature t in fp64, s_v = (logit_v - max) / t as the kernel forms
// it, with fp32 roundoff bounds for the kernel's log p = s - log(sum e) and
// H = log(sum e) - sum(e s) / sum(e), e = exp(s). With Z = sum e, logZ = log Z, p = e / Z and
// A = -sum p s (so H = logZ + A), to first order in u:
//   sums      V positive fp32 terms err relatively by 4 sqrt(V/3) u (4 standard deviations of V
//             roundings that go up as often as down, as in Higham and Mary's probabilistic
//             analysis; the worst case, (V - 1) u, is not approached), plus 4u for expf (within
//             2 ulp on CUDA)
//   logp      that sum error, 2u |s_token| (s rounded twice), 2u logZ (logf), u |logp|
//   entropy   the two sums' error times (1 + 2A) (log carries one, the ratio A both), 2u sum p |s| |s + A|
//             (dH/ds_v = -p_v (s_v + A)), 4u (1 + 2A) + u A (expf, the product e s),
//             u (2 logZ + A + H) (logf, the division, the subtraction)
struct Tempered {
  std::vector<double> logp, logp_tol;
  double entropy = 0, entropy_tol = 0;
};

Tempered tempered(const std::vector<float>& row, double t) {
  const double u = 1.0 / (1 << 24);   // fp32 unit roundoff
  const int V = static_cast<int>(row.size());
  const double mx = *std::max_element(row.begin(), row.end());
  std::vector<double> s(V);
  double Z = 0;
  for (int v = 0; v < V; ++v) Z += std::exp(s[v] = (row[v] - mx) / t);
  const double logZ = std::log(Z);
  double A = 0;
  for (int v = 0; v < V; ++v) A -= std::exp(s[v] - logZ) * s[v];
  double spread = 0;
  for (int v = 0; v < V; ++v) spread += std::exp(s[v] - logZ) * std::fabs(s[v]) * std::fabs(s[v] + A);
  const double sum_err = 4 * std::sqrt(V / 3.0) * u + 4 * u;
  Tempered r;
  for (int v = 0; v < V; ++v) {
    r.logp.push_back(s[v] - logZ);
    r.logp_tol.push_back(sum_err + u * (2 * std::fabs(s[v]) + 2 * logZ + std::fabs(s[v] - logZ)));
  }
  r.entropy = logZ + A;
  r.entropy_tol = sum_err * (1 + 2 * A) + u * (2 * spread + 4 * (1 + 2 * A) + A + 2 * logZ + A + r.entropy);
  return r;
}

// At temperature 0.7 the recorded logp and entropy are those of the whole tempered distribution,
// with or without top-k and top-p cutting the draw (the train phase scores the token under the
// same distribution; a renormalised truncated logp would differ by -log(kept mass), far beyond
// the tolerance); greedy records temperature 1, whatever top-k and top-p say.
TYPED_TEST(Sampling, LogpAndEntropyAreOfTheFullTemperedDistribution) {
  // 5000: plain sampling's chunks (kSampleChunkTokens), the last one partial.
  for (int V : {7, 259, 1000, 5000}) {
    std::vector<float> row = random_row(V, V + 1);
    for (auto& x : row) x = static_cast<float>(TypeParam(x));   // the kernel sees T-rounded logits
    for (const SamplingOptions& o : {SamplingOptions{0.7f, 0, 1.0f}, SamplingOptions{0.7f, 5, 1.0f},
                                     SamplingOptions{0.7f, 0, 0.5f}, SamplingOptions{0.7f, 40, 0.9f},
                                     SamplingOptions{0.0f, 0, 1.0f}, SamplingOptions{0.0f, 5, 0.5f}}) {
      SCOPED_TRACE("V=" + std::to_string(V) + " temperature " + std::to_string(o.temperature) + " k " +
                   std::to_string(o.top_k) + " p " + std::to_string(o.top_p));
      // The float temperature the kernel divides by; 1 when greedy.
      const Tempered ref = tempered(row, o.temperature > 0.0f ? static_cast<double>(o.temperature) : 1.0);
      Draws d = draw<TypeParam>(row, o, 64);
      for (int r = 0; r < 64; ++r) {
        const int t = d.tokens[r];
        ASSERT_GE(t, 0);
        ASSERT_LT(t, V);
        EXPECT_NEAR(d.logp[r], ref.logp[t], ref.logp_tol[t]) << "row " << r << " token " << t;
        EXPECT_NEAR(d.entropy[r], ref.entropy, ref.entropy_tol) << "row " << r;
      }
    }
  }
}

TYPED_TEST(Sampling, TopKAndTopPNeverEmitExcludedTokens) {
  const int V = 300;
  std::vector<float> row = random_row(V, 5);
  for (auto& x : row) x = static_cast<float>(TypeParam(x));
  for (SamplingOptions o : {SamplingOptions{1.0f, 5, 1.0f}, SamplingOptions{0.8f, 0, 0.5f},
                            SamplingOptions{1.3f, 40, 0.9f}, SamplingOptions{1.0f, 1, 1.0f}}) {
    std::vector<double> p = target(row, o);
    Draws d = draw<TypeParam>(row, o, 2000);
    for (int t : d.tokens) ASSERT_GT(p[t], 0.0) << "token " << t << " excluded (k " << o.top_k << ", p " << o.top_p << ")";
  }
}

// Pearson's chi-square over 20000 draws against the fp64 target, below the 0.999 quantile for
// its degrees of freedom (fixed seed: the test is deterministic).
TEST(Sampling, DrawsFollowTheTargetDistribution) {
  const std::vector<float> row = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};
  const double critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};   // by degrees of freedom
  for (const SamplingOptions& o : {SamplingOptions{1.0f, 0, 1.0f}, SamplingOptions{0.7f, 0, 1.0f},
                                   SamplingOptions{1.0f, 4, 1.0f}, SamplingOptions{1.0f, 0, 0.8f},
                                   SamplingOptions{1.5f, 6, 0.9f}}) {
    std::vector<double> p = target(row, o);
    const int kept = static_cast<int>(std::count_if(p.begin(), p.end(), [](double x) { return x > 0; }));
    ASSERT_GE(kept, 2);
    const int n = 20000;
    Draws d = draw<float>(row, o, n, 99);
    std::vector<double> count(row.size(), 0);
    for (int t : d.tokens) count[t] += 1;
    double chi2 = 0;
    for (std::size_t v = 0; v < row.size(); ++v) {
      if (p[v] == 0) {
        EXPECT_EQ(count[v], 0) << v;
        continue;
      }
      chi2 += (count[v] - n * p[v]) * (count[v] - n * p[v]) / (n * p[v]);
    }
    EXPECT_LT(chi2, critical[kept - 1]) << "temperature " << o.temperature << " k " << o.top_k << " p " << o.top_p;
  }
}

// A row of NaN logits (a diverged model) draws -1 with NaN log-probability, greedy, top-k/top-p or
// plain, instead of reading past the row (no index held the maximum: the token stayed V or -1) or
// drawing a token of no mass.
TEST(Sampling, AllNanLogitsDrawTheMarkNotAnIndexPastTheRow) {
  const std::vector<float> row(1000, std::numeric_limits<float>::quiet_NaN());
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  SamplingOptions top;
  top.temperature = 0.8f;
  top.top_k = 5;
  top.top_p = 0.9f;
  SamplingOptions plain;   // temperature alone: the chunked draw
  plain.temperature = 1.0f;
  for (const SamplingOptions& opt : {greedy, top, plain}) {
    const Draws d = draw<float>(row, opt, 2);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(d.tokens[r], -1) << "temperature " << opt.temperature;
      EXPECT_TRUE(std::isnan(d.logp[r]));
    }
  }
}

// One chunk of NaN logits among finite ones (a NaN slice of a diverged model's head): a plain
// draw records a NaN log-probability (as the whole row's sums carry it), not a finite one that
// passed the chunk over, and draws a token of the row; bf16 and float alike.
TEST(Sampling, ANanChunkAmongFiniteOnesLeavesANanLogProbability) {
  const int V = 3 * kSampleChunkTokens;
  std::vector<float> row = random_row(V, 5, 1.0f);
  for (int v = kSampleChunkTokens; v < 2 * kSampleChunkTokens; ++v) row[v] = std::nanf("");
  for (const Draws& d : {draw<float>(row, SamplingOptions{}, 4), draw<bf16>(row, SamplingOptions{}, 4)})
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(d.tokens[r] >= 0 && d.tokens[r] < V) << d.tokens[r];
      EXPECT_TRUE(std::isnan(d.logp[r])) << "row " << r << ": logp " << d.logp[r];
    }
}

TEST(Sampling, SameKeySameTokenAnyBatch) {
  for (int V : {259, 2 * kSampleChunkTokens + 300}) {
    std::vector<float> row = random_row(V, 8, 1.0f);
    for (const SamplingOptions& o : {SamplingOptions{}, SamplingOptions{1.0f, 50, 0.9f}}) {
      Draws a = draw<float>(row, o, 64, 5), b = draw<float>(row, o, 16, 5);
      for (int r = 0; r < 16; ++r) EXPECT_EQ(a.tokens[r], b.tokens[r]) << "V " << V << " row " << r;
      Draws c = draw<float>(row, o, 64, 6);
      EXPECT_NE(a.tokens, c.tokens) << "another seed draws other tokens";
    }
  }
}

// Behind a dominant token (logit 0) every other token of a 131 072-token row sits at -17 (t = 1):
// weights of 4.1e-8, under half an ulp of the running sum past the dominant one, 0.54% of the
// mass together. The walk used to sum them onto its block's lower bound, where they never moved
// it: a draw in that tail went to a chunk's last token (the fallback) or, in the first CUDA
// kernel, past its block. 1 024 draws (fixed keys): every token in range with the fp64
// log-probability of its token, the tail drawn, and its draws not piled on chunks' last tokens.
TEST(Sampling, PlainDrawsReachTokensFarBelowTheMaximum) {
  const int C = kSampleChunkTokens, V = 64 * C, rows = 32, rounds = 32;
  const float tail = -17.0f;
  DeviceView<float> logits("logits", std::size_t(rows) * V);
  auto hl = Kokkos::create_mirror_view(logits);
  for (std::size_t i = 0; i < hl.size(); ++i) hl(i) = i % V == 0 ? 0.0f : tail;
  Kokkos::deep_copy(logits, hl);
  const double log_z = std::log1p((V - 1) * std::exp(double(tail)));
  Kokkos::View<std::uint64_t*, MemSpace> keys("keys", rows);
  auto hk = Kokkos::create_mirror_view(keys);
  Kokkos::View<std::int32_t*, MemSpace> token("token", rows);
  DeviceView<float> logp("logp", rows), entropy("entropy", rows), scratch("scratch", sample_scratch_floats(rows, V));
  int tail_draws = 0, at_chunk_ends = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int r = 0; r < rows; ++r) hk(r) = draw_key(11, round, r, 0, 0);
    Kokkos::deep_copy(keys, hk);
    sample_tokens(ExecSpace(), logits.data(), keys.data(), SamplingOptions{1.0f, 0, 1.0f}, token.data(), logp.data(),
                  entropy.data(), rows, V, scratch.data());
    auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), token);
    auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logp);
    for (int r = 0; r < rows; ++r) {
      const int t = ht(r);
      ASSERT_TRUE(t >= 0 && t < V) << "round " << round << " row " << r << " drew " << t;
      EXPECT_NEAR(hp(r), (t == 0 ? 0.0 : double(tail)) - log_z, 1e-4) << "token " << t;
      tail_draws += t != 0;
      at_chunk_ends += t % C == C - 1;
    }
  }
  EXPECT_GE(tail_draws, 2) << "of " << rows * rounds << " draws (0.54% of the mass)";
  EXPECT_LE(at_chunk_ends, 1) << "of " << tail_draws << " tail draws at a chunk's last token (1 in 2 048 of the tail)";
}

// A plain draw's teams count a row's chunks done in the scratch, and the row's last team to
// finish picks. One scratch used by draws of 64, 1, 8 and 64 rows (as the generator's is, its
// steps' rows changing) draws what a fresh one does, and each draw leaves the counts at zero.
TEST(Sampling, PlainDrawsReuseTheirScratchAtAnyRows) {
  const int V = 3 * kSampleChunkTokens + 77, most = 64;
  const std::vector<float> row = random_row(V, 8, 1.0f);
  DeviceView<float> scratch("scratch", sample_scratch_floats(most, V));
  const long per_row = static_cast<long>(sample_scratch_floats(1, V));
  for (int rows : {64, 1, 8, 64}) {
    const Draws fresh = draw<float>(row, SamplingOptions{}, rows, 9);
    const Draws reused = draw<float>(row, SamplingOptions{}, rows, 9, scratch.data());
    EXPECT_EQ(reused.tokens, fresh.tokens) << rows << " rows";
    EXPECT_EQ(reused.logp, fresh.logp) << rows << " rows";
    EXPECT_EQ(reused.entropy, fresh.entropy) << rows << " rows";
    auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), scratch);
    for (int r = 0; r < most; ++r) {
      std::uint32_t count = 0;
      std::memcpy(&count, &hs(r * per_row + per_row - 1), sizeof count);
      EXPECT_EQ(count, 0u) << "row " << r << "'s count after a draw of " << rows << " rows";
    }
  }
}

// Plain sampling splits a row into chunks of kSampleChunkTokens: the likely tokens sit at the
// chunks' edges (first and last token of each, the last chunk partial), all others at -40 (a
// total probability below 1e-14). The draws follow the fp64 target (chi-square as above, 7
// degrees of freedom) and never leave the likely tokens.
TEST(Sampling, PlainDrawsAcrossChunksFollowTheTargetDistribution) {
  const int C = kSampleChunkTokens, V = 3 * C + 100;
  const std::vector<int> likely = {0, C - 1, C, 2 * C - 1, 2 * C, 3 * C - 1, 3 * C, V - 1};
  const std::vector<float> value = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};
  std::vector<float> row(V, -40.0f);
  for (std::size_t i = 0; i < likely.size(); ++i) row[likely[i]] = value[i];
  for (float t : {1.0f, 0.7f}) {
    const SamplingOptions o{t, 0, 1.0f};
    const std::vector<double> p = target(row, o);
    const int n = 5000;   // the least likely token still expected about 45 times (temperature 0.7)
    Draws d = draw<float>(row, o, n, 42);
    std::vector<double> count(V, 0);
    for (int tok : d.tokens) count[tok] += 1;
    double chi2 = 0, elsewhere = n;
    for (int v : likely) {
      chi2 += (count[v] - n * p[v]) * (count[v] - n * p[v]) / (n * p[v]);
      elsewhere -= count[v];
    }
    EXPECT_EQ(elsewhere, 0) << "draws outside the likely tokens";
    EXPECT_LT(chi2, 24.32) << "temperature " << t;   // the 0.999 quantile at 7 degrees of freedom
  }
}

// A GPU draw splits each chunk into blocks (8 tokens a thread in kernels/sample_plain.cu) and
// finds the block where the target falls from the blocks' prefix sums. Every token at a chunk's
// end and at each block's start has a weight of about e^-60 of the others (never drawn in 10^20
// draws), its chunk's tokens otherwise random: a target that fell between two blocks' rounded
// bounds used to go to the chunk's last token of weight, that one (about one draw in 10^4), and
// one exactly on a block's lower bound to the block's first token (about one in 10^3, while the
// walk took a token that did not move its sum). 200 rounds of 1024 rows of Qwen3's vocabulary
// draw none of them. (On the host a team has one thread: one block a chunk, no edges.)
TEST(Sampling, TargetsBetweenBlocksNeverFallToAChunksLastToken) {
  if (!kDeviceIsGpu) GTEST_SKIP() << "the host's teams have one thread: one block a chunk, no edges between blocks";
  const int C = kSampleChunkTokens, V = 151936, rows = 1024, rounds = 200;
  DeviceView<float> logits("logits", std::size_t(rows) * V);
  auto hl = Kokkos::create_mirror_view(logits);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const auto negligible = [&](int v) { return v % C == C - 1 || v % 8 == 0; };
  for (int v = 0; v < V; ++v) hl(v) = negligible(v) ? -60.0f : uniform(gen);
  for (int r = 1; r < rows; ++r)
    for (int v = 0; v < V; ++v) hl(std::size_t(r) * V + v) = hl(v);
  Kokkos::deep_copy(logits, hl);
  Kokkos::View<std::uint64_t*, MemSpace> keys("keys", rows);
  auto hk = Kokkos::create_mirror_view(keys);
  Kokkos::View<std::int32_t*, MemSpace> token("token", rows);
  DeviceView<float> logp("logp", rows), entropy("entropy", rows), scratch("scratch", sample_scratch_floats(rows, V));
  long negligible_draws = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int r = 0; r < rows; ++r) hk(r) = draw_key(5, round, r, 0, 0);
    Kokkos::deep_copy(keys, hk);
    sample_tokens(ExecSpace(), logits.data(), keys.data(), SamplingOptions{1.0f, 0, 1.0f}, token.data(), logp.data(),
                  entropy.data(), rows, V, scratch.data());
    auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), token);
    for (int r = 0; r < rows; ++r) negligible_draws += negligible(ht(r)) ? 1 : 0;
  }
  EXPECT_EQ(negligible_draws, 0) << "of " << long(rows) * rounds << " draws";
}

}  // namespace
}  // namespace shardrl
