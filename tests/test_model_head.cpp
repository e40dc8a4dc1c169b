// The head: computed in chunks of tokens, it equals the whole batch's head; on the scored tokens
// only, it equals the head on every token; logits it does not hold (a chunked forward's, or any
// once a layer has run again) are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model_test_support.hpp"

namespace shardrl {
namespace {

using namespace model_test;

// The head in chunks of 5 tokens (18 tokens: 5, 5, 5, 3; backward recomputes all but the last)
// computes what it computes over the whole batch at once: per-token log-probabilities, the loss
// and every gradient, to rounding: a GEMM of 5 rows may sum in another order than one of 18
// (cuBLAS picks kernels by shape, and so does OpenBLAS for the rows past its kernels' unroll:
// single-threaded on a 2-core CI machine, 5 rows and 18 gave logits a bit apart), which moves a
// logit by its last bit (bf16: 2^-8 relative of logits of size ~0.2), and the head's weight
// gradient sums its chunks' GEMMs instead of one. Its logits buffer holds 5 tokens, not 18.
TEST(Model, ChunkedHeadEqualsWholeBatchHead) {
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "bf16");
    ModelShape s = tiny_shape();
    // A vocabulary whose logits, even 5 tokens' of them, outweigh the layer scratch that shares
    // their memory (Activations::shared), in whole 256-byte blocks: the memory saved is then the
    // logits' alone.
    s.vocab_size = 4096;
    Batch b(2, 9, s.vocab_size, 31);
    ModelOptions whole_options = options(s, p, 2, 9), chunked_options = whole_options;
    chunked_options.logits_chunk_tokens = 5;
    Rig whole(whole_options, 17), chunked(chunked_options, 17);
    whole.set(b);
    chunked.set(b);
    const double whole_loss = whole.step(1.0f / b.count()), chunked_loss = chunked.step(1.0f / b.count());
    const bool fp32 = p == Precision::fp32;
    EXPECT_NEAR(chunked_loss, whole_loss, (fp32 ? 1e-6 : 1e-3) * std::fabs(whole_loss));
    const std::vector<float> whole_logp = whole.host(whole.model.logp(), 18);
    const std::vector<float> chunked_logp = chunked.host(chunked.model.logp(), 18);
    for (int t = 0; t < 18; ++t) {
      EXPECT_NEAR(chunked_logp[t], whole_logp[t], (fp32 ? 1e-5 : 2e-3) * std::max(1.0f, std::fabs(whole_logp[t])))
          << "token " << t;
    }
    EXPECT_EQ(whole.model.activation_bytes() - chunked.model.activation_bytes(),
              std::size_t(18 - 5) * s.vocab_size * whole.model.compute_type_size());
    const double rtol = p == Precision::fp32 ? 1e-5 : 2e-2;
    for (int u = 0; u < whole.model.unit_count(); ++u) {
      const auto w = whole.host(whole.params.grads(u), whole.params.numel(u));
      const auto c = chunked.host(chunked.params.grads(u), chunked.params.numel(u));
      double scale = 0;
      for (float x : w) scale = std::max(scale, double(std::fabs(x)));
      for (std::size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(c[i], w[i], rtol * scale) << "unit " << u << " element " << i;
    }
  }
}

// Tokens marked unscored (kUnscoredTarget: a prompt's, padding) are left out of the head: it runs
// on the scored tokens' rows only, gathered, and gives what it gives when it runs on every token
// (Transformer::score_every_token, what a captured step does): the scored tokens' log-probabilities
// and entropies at a temperature, and with a gradient through both, every parameter's gradient;
// 0 for the unscored tokens. To rounding, as for chunks above (GEMMs of other row counts), in
// chunks of 4 tokens (more than one chunk of scored rows), with and without tied embeddings. A
// micro-batch with no scored token (a rank's padding micro-batch) adds no gradient at all.
TEST(Model, TheHeadRunsOnTheScoredTokensOnly) {
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (bool tied : {true, false}) {
      SCOPED_TRACE(std::string(p == Precision::fp32 ? "fp32" : "bf16") + (tied ? ", tied" : ", untied"));
      ModelShape s = tiny_shape();
      s.tie_embeddings = tied;
      constexpr int B = 2, S = 9, N = B * S;
      ModelOptions o = options(s, p, B, S);
      o.logits_chunk_tokens = 4;
      Batch b(B, S, s.vocab_size, 5);
      // Row 0 a prompt of 3 positions, then scored; row 1 scored from position 5, padded after 7.
      std::vector<std::int32_t> targets = b.targets;
      std::vector<bool> scored(N, false);
      for (int t = 0; t < N; ++t) scored[t] = (t >= 2 && t < S) || (t >= S + 4 && t < S + 7);
      for (int t = 0; t < N; ++t)
        if (!scored[t]) targets[t] = kUnscoredTarget;
      const int scored_count = static_cast<int>(std::count(scored.begin(), scored.end(), true));
      std::mt19937 gen(3);
      std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
      std::vector<float> dlogp(N, 0.0f), dentropy(N, 0.0f);
      for (int t = 0; t < N; ++t)
        if (scored[t]) {
          dlogp[t] = grad(gen);
          dentropy[t] = grad(gen);
        }
      struct Result {
        std::vector<float> logp, entropy;
        std::vector<std::vector<float>> grads;
        int head_rows;
      };
      const auto run = [&](bool every, const std::vector<std::int32_t>& t) {
        Rig rig(o, 17);
        rig.model.score_every_token(every);
        rig.model.set_batch(b.tokens.data(), t.data(), B, S);
        rig.model.set_token_distribution(TokenDistribution{0.7f, true});
        rig.params.zero_grads();
        const void* embed = rig.params.compute_weights(0);
        const int head = rig.model.head_unit();
        for (int u = 0; u < rig.model.unit_count(); ++u)
          rig.model.forward_unit(u, rig.params.compute_weights(u), u == head ? embed : nullptr);
        Result r{rig.host(rig.model.logp(), N), rig.host(rig.model.entropy(), N), {}, rig.model.head_rows()};
        for (auto [from, to] : {std::pair{&dlogp, rig.model.dlogp()}, {&dentropy, rig.model.dentropy()}})
          Kokkos::deep_copy(Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(to, N),
                            Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                from->data(), N));
        for (int u = head; u >= 0; --u) {
          const bool tied_head = u == head && tied;
          rig.model.backward_unit(u, rig.params.compute_weights(u), rig.params.grads(u), tied_head ? embed : nullptr,
                                  tied_head ? rig.params.grads(0) : nullptr);
        }
        for (int u = 0; u < rig.model.unit_count(); ++u)
          r.grads.push_back(rig.host(rig.params.grads(u), rig.params.numel(u)));
        return r;
      };
      const Result every = run(true, targets), compact = run(false, targets);
      EXPECT_EQ(every.head_rows, N);
      EXPECT_EQ(compact.head_rows, scored_count);
      const bool fp32 = p == Precision::fp32;
      for (int t = 0; t < N; ++t) {
        if (!scored[t]) {
          EXPECT_EQ(compact.logp[t], 0.0f) << "token " << t;
          EXPECT_EQ(every.logp[t], 0.0f) << "token " << t;
          EXPECT_EQ(compact.entropy[t], 0.0f) << "token " << t;
          EXPECT_EQ(every.entropy[t], 0.0f) << "token " << t;
          continue;
        }
        EXPECT_NEAR(compact.logp[t], every.logp[t], (fp32 ? 1e-5 : 2e-3) * std::max(1.0f, std::fabs(every.logp[t])))
            << "token " << t;
        EXPECT_NEAR(compact.entropy[t], every.entropy[t], (fp32 ? 1e-5 : 2e-3) * std::fabs(every.entropy[t]))
            << "token " << t;
      }
      const double rtol = fp32 ? 1e-5 : 2e-2;
      for (std::size_t u = 0; u < every.grads.size(); ++u) {
        const std::vector<float>& w = every.grads[u];
        double scale = 0;
        for (float x : w) scale = std::max(scale, double(std::fabs(x)));
        ASSERT_GT(scale, 0.0) << "unit " << u << " has no gradient: the comparison would be empty";
        for (std::size_t i = 0; i < w.size(); ++i)
          ASSERT_NEAR(compact.grads[u][i], w[i], rtol * scale) << "unit " << u << " element " << i;
      }
      // Nothing scored: no head rows, every log-probability 0, no gradient anywhere.
      const Result none = run(false, std::vector<std::int32_t>(N, kUnscoredTarget));
      EXPECT_EQ(none.head_rows, 0);
      for (int t = 0; t < N; ++t) EXPECT_EQ(none.logp[t], 0.0f) << "token " << t;
      for (std::size_t u = 0; u < none.grads.size(); ++u)
        for (std::size_t i = 0; i < none.grads[u].size(); ++i)
          ASSERT_EQ(none.grads[u][i], 0.0f) << "unit " << u << " element " << i;
    }
}

// The logits of a chunked forward are not the batch's: asking for them is a caller's bug.
TEST(ModelDeathTest, LogitsOfAChunkedForwardAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ModelShape s = tiny_shape();
        ModelOptions o = options(s, Precision::fp32, 2, 9);
        o.logits_chunk_tokens = 5;
        Rig rig(o, 17);
        Batch b(2, 9, s.vocab_size, 31);
        rig.set(b);
        rig.nll_sum(b);
        rig.model.logits();
      },
      "computed in chunks");
}

// A layer's forward writes scratch that shares the logits' memory (Activations::shared): the
// logits of the forward before it are gone, and asking for them is refused.
TEST(ModelDeathTest, LogitsAreGoneOnceALayerRunsAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ModelShape s = tiny_shape();
  ModelOptions o = options(s, Precision::fp32, 2, 9);
  Rig rig(o, 17);
  Batch b(2, 9, s.vocab_size, 31);
  rig.set(b);
  rig.nll_sum(b);
  EXPECT_NE(rig.model.logits(), nullptr);   // held: the whole batch's, no layer since
  EXPECT_DEATH(
      {
        rig.model.forward_unit(1, rig.params.compute_weights(1));
        rig.model.logits();
      },
      "a layer's scratch");
}


}  // namespace
}  // namespace shardrl
