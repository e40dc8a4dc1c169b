// Embedding gather and scatter-add kernels against an fp64 host reference, for float and bf16,
// including repeated tokens (the backward must sum them) and accumulation into dW.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/embedding.hpp"

namespace shardrl {
namespace {

using test::Buffer;
using test::expect_close;
using test::random_buffer;
using test::random_values;
using test::expect_guard_untouched;
using test::kGuard;
using test::unit_roundoff;

struct Shape {
  int N, D, V;
};
const Shape kShapes[] = {{1, 1, 1}, {3, 7, 5}, {37, 64, 11}, {5, 129, 300}, {37, 129, 3}};

std::vector<double> random_tokens(int N, int V, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::vector<double> t(N);
  for (auto& v : t) v = dist(gen);
  return t;
}

Buffer<std::int32_t> token_buffer(const std::vector<double>& tokens) {
  Buffer<std::int32_t> b(static_cast<long>(tokens.size()), "tokens");
  b.set(tokens);
  return b;
}

// fp64 references.
std::vector<double> ref_forward(const std::vector<double>& tokens, const std::vector<double>& W, int D) {
  std::vector<double> out(tokens.size() * D);
  for (std::size_t n = 0; n < tokens.size(); ++n)
    for (int d = 0; d < D; ++d) out[n * D + d] = W[static_cast<long>(tokens[n]) * D + d];
  return out;
}
// dW is accumulated into (its incoming values are kept).
void ref_backward(const std::vector<double>& tokens, const std::vector<double>& dout, int D, std::vector<double>& dW) {
  for (std::size_t n = 0; n < tokens.size(); ++n)
    for (int d = 0; d < D; ++d) dW[static_cast<long>(tokens[n]) * D + d] += dout[n * D + d];
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  // L(W) = sum c(n,d) * out(n,d); tokens repeat so the reference's sum over repeats is checked.
  const int N = 5, D = 3, V = 4;
  const std::vector<double> tokens = {2, 0, 2, 3, 2};
  std::vector<double> W = random_values<double>(V * D, 11);
  const std::vector<double> c = random_values<double>(N * D, 12);
  auto loss = [&](const std::vector<double>& w) {
    std::vector<double> out = ref_forward(tokens, w, D);
    double l = 0;
    for (int i = 0; i < N * D; ++i) l += c[i] * out[i];
    return l;
  };
  std::vector<double> dW(V * D, 0.0);
  ref_backward(tokens, c, D, dW);
  const double h = 1e-4;
  for (int i = 0; i < V * D; ++i) {
    std::vector<double> wp = W, wm = W;
    wp[i] += h;
    wm[i] -= h;
    EXPECT_NEAR(dW[i], (loss(wp) - loss(wm)) / (2 * h), 1e-9) << "element " << i;
  }
}

// embedding_backward with the grouping it needs, built from the host tokens as the model does.
template <class T>
void backward_grouped(const std::vector<double>& tokens, const Buffer<std::int32_t>& tok_dev, const Buffer<T>& dout,
                      Buffer<float>& dW, int N, int D) {
  std::vector<std::int32_t> ids(N), order(N), starts(N + 2);
  for (int n = 0; n < N; ++n) ids[n] = static_cast<std::int32_t>(tokens[n]);
  starts[N + 1] = kernels::group_tokens(ids.data(), N, order.data(), starts.data());
  Buffer<std::int32_t> order_dev(N), starts_dev(N + 2);
  order_dev.set(std::vector<double>(order.begin(), order.end()));
  starts_dev.set(std::vector<double>(starts.begin(), starts.end()));
  kernels::embedding_backward<T>(ExecSpace(), tok_dev.data(), order_dev.data(), starts_dev.data(),
                                 starts_dev.data() + N + 1, dout.data(), dW.data(), N, D);
}

template <class T>
class EmbeddingKernel : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(EmbeddingKernel, KernelTypes);

TYPED_TEST(EmbeddingKernel, ForwardGathersRows) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    std::vector<double> tokens = random_tokens(s.N, s.V, ++seed);
    std::vector<double> W;
    Buffer<T> W_dev = random_buffer<T>(static_cast<long>(s.V) * s.D, ++seed, &W);
    Buffer<std::int32_t> tok_dev = token_buffer(tokens);
    const long n = static_cast<long>(s.N) * s.D;
    Buffer<T> out(n + kGuard);
    out.poison();
    kernels::embedding_forward<T>(space, tok_dev.data(), W_dev.data(), out.data(), s.N, s.D);
    std::vector<double> got = out.host();
    expect_guard_untouched(got, n, "embedding_forward");
    got.resize(n);
    // A gather copies values bit for bit: tolerance 0.
    expect_close(got, ref_forward(tokens, W, s.D), 0.0, 0.0, "embedding_forward");
  }
}

// Each rank's part of the lookup from its slice of the table alone: slices of the flat (V, D)
// table that cut rows (the last padded past the table, as shards are), tokens of every rank,
// and ids outside [0, V) (which no slice holds). Each part is the lookup where its slice holds
// the element and zero elsewhere, so the parts' sum, the reduce-scatter's, is the lookup.
TYPED_TEST(EmbeddingKernel, ForwardFromSlicesSumsToTheLookup) {
  using T = TypeParam;
  ExecSpace space;
  std::uint64_t seed = 150;
  for (const Shape& s : kShapes)
    for (int ranks : {1, 2, 3, 7}) {
      std::vector<double> tokens = random_tokens(s.N, s.V, ++seed);
      tokens[0] = -1;                         // out of range: zero in every part
      if (s.N > 2) tokens[2] = s.V;
      const long table = static_cast<long>(s.V) * s.D;
      const long shard = (table + ranks - 1) / ranks;
      std::vector<double> W;
      Buffer<T> W_dev = random_buffer<T>(shard * ranks, ++seed, &W);   // the padded table
      Buffer<std::int32_t> tok_dev = token_buffer(tokens);
      const long n = static_cast<long>(s.N) * s.D;
      std::vector<double> sum(n, 0.0);
      for (int r = 0; r < ranks; ++r) {
        Buffer<T> out(n + kGuard);
        out.poison();
        kernels::embedding_forward_owned<T>(space, tok_dev.data(), W_dev.data() + r * shard, r * shard,
                                            (r + 1) * shard, s.V, out.data(), s.N, s.D);
        std::vector<double> got = out.host();
        expect_guard_untouched(got, n, "embedding_forward_owned");
        for (long i = 0; i < n; ++i) {
          const long id = static_cast<long>(tokens[i / s.D]), e = id * s.D + i % s.D;
          const bool mine = id >= 0 && id < s.V && e >= r * shard && e < (r + 1) * shard;
          ASSERT_EQ(got[i], mine ? W[e] : 0.0) << "rank " << r << " of " << ranks << ", element " << i;
          sum[i] += got[i];
        }
      }
      std::vector<double> want(n, 0.0);
      for (long i = 0; i < n; ++i) {
        const long id = static_cast<long>(tokens[i / s.D]);
        if (id >= 0 && id < s.V) want[i] = W[id * s.D + i % s.D];
      }
      expect_close(sum, want, 0.0, 0.0, "embedding_forward_owned summed over ranks");
    }
}

TYPED_TEST(EmbeddingKernel, BackwardAccumulatesIntoGradient) {
  using T = TypeParam;
  std::uint64_t seed = 200;
  for (const Shape& s : kShapes) {
    std::vector<double> tokens = random_tokens(s.N, s.V, ++seed);
    std::vector<double> dout;
    Buffer<T> dout_dev = random_buffer<T>(static_cast<long>(s.N) * s.D, ++seed, &dout);
    Buffer<std::int32_t> tok_dev = token_buffer(tokens);
    const long n = static_cast<long>(s.V) * s.D;
    // Pre-filled gradient (known values): the kernel must add to it, not overwrite it.
    std::vector<double> dW = random_values<float>(n, ++seed);
    std::vector<double> dW_init = dW;
    dW_init.resize(n + kGuard, std::nan(""));
    Buffer<float> dW_dev(n + kGuard);
    dW_dev.set(dW_init);
    backward_grouped<T>(tokens, tok_dev, dout_dev, dW_dev, s.N, s.D);

    // Tolerance: bf16 -> fp32 of dout is exact, so only the fp32 sums round. A row that k
    // tokens hit sums k+1 terms in some order: |error| <= k * u_f * (sum of |terms|).
    std::vector<double> terms_abs(n), hits(n, 0.0);
    for (long i = 0; i < n; ++i) terms_abs[i] = std::fabs(dW[i]);
    for (int t = 0; t < s.N; ++t)
      for (int d = 0; d < s.D; ++d) {
        const long i = static_cast<long>(tokens[t]) * s.D + d;
        terms_abs[i] += std::fabs(dout[static_cast<long>(t) * s.D + d]);
        hits[i] += 1;
      }
    double atol = 0;
    for (long i = 0; i < n; ++i) atol = std::max(atol, hits[i] * unit_roundoff<float>() * terms_abs[i]);
    ref_backward(tokens, dout, s.D, dW);
    std::vector<double> got = dW_dev.host();
    expect_guard_untouched(got, n, "embedding_backward");
    got.resize(n);
    expect_close(got, dW, 0.0, atol, "embedding_backward");
  }
}

TYPED_TEST(EmbeddingKernel, BackwardSumsRepeatedTokens) {
  using T = TypeParam;
  // Every token is 1: row 1 of dW must receive all N rows of dout, the other rows nothing.
  // Values are small integers and halves, so every partial sum is exact in fp32: tolerance 0.
  const int N = 37, D = 7, V = 3;
  Buffer<std::int32_t> tok_dev = token_buffer(std::vector<double>(N, 1.0));
  std::vector<double> dout(N * D);
  for (int i = 0; i < N * D; ++i) dout[i] = (i % 3) - 1.0;   // -1, 0, 1
  Buffer<T> dout_dev(N * D);
  dout_dev.set(dout);
  std::vector<double> dW(V * D, 0.5);
  Buffer<float> dW_dev(V * D);
  dW_dev.set(dW);
  backward_grouped<T>(std::vector<double>(N, 1.0), tok_dev, dout_dev, dW_dev, N, D);
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D; ++d) dW[1 * D + d] += dout[n * D + d];
  expect_close(dW_dev.host(), dW, 0.0, 0.0, "embedding_backward repeated tokens");
}

// Repeats of a token are summed in position order, whatever the device: values of very different
// magnitudes make fp32 sums depend on their order, and the result must equal, bit for bit, the
// sequential fp32 sum over positions (then added to dW once). Tokens of several ids interleave.
TYPED_TEST(EmbeddingKernel, BackwardSumsRepeatsInPositionOrder) {
  using T = TypeParam;
  const int N = 257, D = 33, V = 5;
  std::vector<double> tokens(N);
  for (int n = 0; n < N; ++n) tokens[n] = (n * 7) % 3 + 1;   // ids 1..3 interleaved; 0 and 4 unused
  std::vector<double> dout(static_cast<std::size_t>(N) * D);
  std::mt19937_64 gen(77);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (auto& x : dout) {
    const int e = static_cast<int>(gen() % 40) - 20;   // magnitudes 2^-20 .. 2^19
    x = static_cast<float>(T(static_cast<float>((gen() % 2 ? 1 : -1) * std::ldexp(mant(gen), e))));
  }
  Buffer<std::int32_t> tok_dev = token_buffer(tokens);
  Buffer<T> dout_dev(static_cast<long>(N) * D);
  dout_dev.set(dout);
  std::vector<double> dW(static_cast<std::size_t>(V) * D, 0.25);
  Buffer<float> dW_dev(V * D);
  dW_dev.set(dW);
  backward_grouped<T>(tokens, tok_dev, dout_dev, dW_dev, N, D);
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < D; ++d) {
      float sum = 0.0f;
      for (int n = 0; n < N; ++n)
        if (static_cast<int>(tokens[n]) == v) sum += static_cast<float>(dout[static_cast<std::size_t>(n) * D + d]);
      dW[static_cast<std::size_t>(v) * D + d] = static_cast<float>(0.25f + sum);
    }
  expect_close(dW_dev.host(), dW, 0.0, 0.0, "embedding_backward in position order");
}

}  // namespace
}  // namespace shardrl
